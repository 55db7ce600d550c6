"""The CustomJob a spec becomes on Vertex AI: ``to_vertex``'s worker pools, then Python-module pools
turned into ``pythonPackageSpec`` on a prebuilt TensorFlow training image. Pure: no network."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import re
from importlib import metadata
from typing import Any

from multiworker.containers.vertex_images import END_OF_AVAILABILITY, check_image
from multiworker.errors import UserError
from multiworker.spec.formats.schema import check_schema
from multiworker.spec.formats.target import Target
from multiworker.spec.formats.vertex import POOL_ROLES, write
from multiworker.spec.model import JobSpec

__all__ = ["Plan", "plan_job", "executor_image", "console_url", "task_replicas", "PREBUILT_TF"]

log = logging.getLogger(__name__)
PLATFORM = "Vertex AI"

# Prebuilt TensorFlow training images (minor versions), with their end-of-availability dates in
# multiworker.containers.vertex_images: 2.17 is the newest TensorFlow there; every one is
# `{us,europe,asia}-docker.pkg.dev/vertex-ai/training/tf-{cpu,gpu}.2-N.py310:latest`.
PREBUILT_TF = tuple(sorted(END_OF_AVAILABILITY))


@dataclasses.dataclass
class Plan:
    """What one submission needs: the CustomJob body (packageUris still to fill), what to package."""

    body: dict
    notes: list[str]
    package_pools: list[int]  # positions of pythonPackageSpec pools
    tasks: dict[str, str]  # Cloud Logging task name (workerpool0-0) -> replica name (chief-0)
    tf_minor: int | None  # the executor image's TensorFlow 2.N, when known


class _RunTarget(Target):
    """A conversion for running: a job without a chief runs with worker 0 as Vertex's chief (a note)."""

    def roles(self, platform: str) -> list[tuple[str, int, str]]:
        saved, self.allow_loss = self.allow_loss, True
        try:
            out = super().roles(platform)
        finally:
            self.allow_loss = saved
        self.notes[:] = [n for n in self.notes if not n.startswith("--allow-loss: pools:")]
        return out


def _region_prefix(region: str) -> str:
    if region.startswith(("europe", "me-", "africa")):
        return "europe"
    if region.startswith(("asia", "australia")):
        return "asia"
    return "us"


def executor_image(region: str, *, gpu: bool, notes: list[str], today: dt.date | None = None) -> tuple[str, int]:
    """The prebuilt TensorFlow training image closest to the installed TensorFlow, and its 2.N; one
    past its end of availability is refused (build an image and pass --image)."""
    try:
        version = metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        version = None
    match = re.match(r"2\.(\d+)", version or "")
    minor = int(match.group(1)) if match else PREBUILT_TF[-1]
    if minor > PREBUILT_TF[-1]:
        notes.append(f"TensorFlow {version} is installed; the newest prebuilt Vertex AI training image has "
                     f"2.{PREBUILT_TF[-1]}: using it (pass --executor-image or --image to choose another)")
        minor = PREBUILT_TF[-1]
    elif minor < PREBUILT_TF[0]:
        notes.append(f"TensorFlow {version} is older than any prebuilt training image; using 2.{PREBUILT_TF[0]}")
        minor = PREBUILT_TF[0]
    kind = "gpu" if gpu else "cpu"
    image = f"{_region_prefix(region)}-docker.pkg.dev/vertex-ai/training/tf-{kind}.2-{minor}.py310:latest"
    check_image(image, field="the default --executor-image of a Python-module pool", today=today)
    return image, minor


def console_url(resource_name: str) -> str:
    """The Cloud console page of a CustomJob ``projects/P/locations/R/customJobs/ID``."""
    parts = resource_name.split("/")
    project, region, job = parts[1], parts[3], parts[5]
    return f"https://console.cloud.google.com/vertex-ai/locations/{region}/training/{job}?project={project}"


def task_replicas(pools: list[tuple[str, int, str]]) -> dict[str, str]:
    """Cloud Logging's task names (``workerpool<P>-<I>``) -> multiworker replica names.

    Without a chief, worker 0 runs as pool 0 and the other workers in pool 1: their names stay worker-N.
    """
    out: dict[str, str] = {}
    shift = 1 if pools and pools[0][0] == "chief" and pools[0][2] == "worker" else 0
    for role, n, program_role in pools:
        position = POOL_ROLES.index(role)
        for i in range(n):
            if program_role == "worker" and shift:
                name = "worker-0" if role == "chief" else f"worker-{i + shift}"
            else:
                name = f"{role}-{i}"
            out[f"workerpool{position}-{i}"] = name
    return out


def plan_job(spec: JobSpec, *, job_id: str, region: str, image: str | None = None,
             executor: str | None = None, staging_bucket: str | None = None,
             trainer_args: list[str] | tuple[str, ...] = (), source: str = "<spec>",
             allow_loss: bool = False, today: dt.date | None = None) -> Plan:
    """The CustomJob body for ``spec``: a pool whose program has an image (its own, the job's or
    ``image``) is a container pool; a Python-module pool without one runs from the packaged working
    directory on ``executor`` (default: the prebuilt TensorFlow image). ``output_dir`` must be gs://.
    What Vertex AI cannot express is an error, or a note with ``allow_loss``."""
    notes: list[str] = []
    gpu = any(str((spec.resolved(r).machine or {}).get("accelerator_type", "")).startswith("NVIDIA")
              for r in spec.replica_counts())
    module_roles = [r for r in spec.replica_counts() if not image and not spec.resolved(r).image]
    for role in module_roles:
        if not spec.resolved(role).module:
            raise UserError(f"pools.{role}: runs a command, which needs a container image on Vertex AI; pass "
                            "--image IMAGE (or set `image`), or run a Python `module` packaged from working_dir")
    check_image(image, field="--image", today=today)
    check_image(executor, field="--executor-image", today=today)
    for role in spec.replica_counts():
        check_image(spec.resolved(role).image, field=f"{source}: pools.{role}.image", today=today)
    tf_minor = None
    if module_roles and not executor:
        executor, tf_minor = executor_image(region, gpu=gpu, notes=notes, today=today)
    target = _RunTarget(spec=spec, to="vertex", source=source, image=image or executor, allow_loss=allow_loss)
    body = write(target)
    pools = target.roles(PLATFORM)
    notes += [n for n in dict.fromkeys(target.notes) if n not in notes]
    job_spec = body["jobSpec"]
    if "baseOutputDirectory" not in job_spec and staging_bucket:
        job_spec["baseOutputDirectory"] = {"outputUriPrefix": f"{staging_bucket.rstrip('/')}/multiworker/{job_id}/output"}
    package_pools = []
    for role, _n, program_role in pools:
        pool = job_spec["workerPoolSpecs"][POOL_ROLES.index(role)]
        container = pool["containerSpec"]
        if trainer_args:
            container["args"] = [*container.get("args", []), *trainer_args]
        if program_role in module_roles:
            pool.pop("containerSpec")
            package: dict[str, Any] = {"executorImageUri": container["imageUri"], "packageUris": [],
                                       "pythonModule": spec.resolved(program_role).module}
            for key in ("args", "env"):
                if key in container:
                    package[key] = container[key]
            pool["pythonPackageSpec"] = package
            package_pools.append(POOL_ROLES.index(role))
    body["labels"] = {"multiworker-job": job_id}
    check_schema(body, "vertex", source=source)
    return Plan(body=body, notes=notes, package_pools=package_pools, tasks=task_replicas(pools), tf_minor=tf_minor)


def set_packages(plan: Plan, uris: list[str]) -> dict:
    """The body with every package pool's ``packageUris`` set, validated against the CustomJob schema."""
    for position in plan.package_pools:
        plan.body["jobSpec"]["workerPoolSpecs"][position]["pythonPackageSpec"]["packageUris"] = list(uris)
    check_schema(plan.body, "vertex", source="CustomJob")
    return plan.body
