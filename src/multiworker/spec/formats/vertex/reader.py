"""Vertex AI CustomJob: the `gcloud ai custom-jobs create --config` YAML, a full CustomJob, or the
Python SDK's ``worker_pool_specs`` list. Pool position is the role: chief, worker, ps, evaluator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic.alias_generators import to_camel, to_snake

from multiworker.errors import SpecError
from multiworker.spec.formats.common import (
    CamelModel,
    Many,
    Parsed,
    Str,
    finish,
    job_name,
    program_of,
    validate,
)
from multiworker.spec.formats.frameworks import VERTEX_ENTRY
from multiworker.spec.model import parse_duration

__all__ = ["parse", "POOL_ROLES", "VertexJobOutput"]

POOL_ROLES = ("chief", "worker", "ps", "evaluator")


class EnvVar(CamelModel):
    name: str
    value: Str = ""


class ContainerSpec(CamelModel):
    image_uri: str
    command: Many[Str] | None = None
    args: Many[Str] | None = None
    env: Many[EnvVar] | None = None


class PythonPackageSpec(CamelModel):
    executor_image_uri: str
    package_uris: Many[str]
    python_module: str
    args: Many[Str] | None = None
    env: Many[EnvVar] | None = None


class MachineSpec(CamelModel):
    machine_type: str | None = None
    accelerator_type: str | None = None
    accelerator_count: int | None = None
    gpu_partition_size: str | None = None
    tpu_topology: str | None = None
    reservation_affinity: dict | None = None


class DiskSpec(CamelModel):
    boot_disk_type: str | None = None
    boot_disk_size_gb: int | None = None


class WorkerPoolSpec(CamelModel):
    container_spec: ContainerSpec | None = None
    python_package_spec: PythonPackageSpec | None = None
    machine_spec: MachineSpec | None = None
    disk_spec: DiskSpec | None = None
    replica_count: int | None = None
    nfs_mounts: Many[dict] | None = None
    lustre_mounts: Many[dict] | None = None


class GcsDestination(CamelModel):
    output_uri_prefix: str


class Scheduling(CamelModel):
    timeout: str | None = None
    restart_job_on_worker_restart: bool | None = None
    disable_retries: bool | None = None
    max_wait_duration: str | None = None
    strategy: str | None = None


class CustomJobSpec(CamelModel):
    worker_pool_specs: Many[WorkerPoolSpec | None]
    base_output_directory: GcsDestination | None = None
    scheduling: Scheduling | None = None
    service_account: str | None = None
    network: str | None = None
    reserved_ip_ranges: Many[str] | None = None
    psc_interface_config: dict | None = None
    protected_artifact_location_id: str | None = None
    persistent_resource_id: str | None = None
    tensorboard: str | None = None
    enable_web_access: bool | None = None
    enable_dashboard_access: bool | None = None
    experiment: str | None = None
    experiment_run: str | None = None
    models: Many[str] | None = None


class VertexJobOutput(CamelModel):
    """The output-only fields of a Vertex AI job resource (as `gcloud ai ... describe` prints them);
    accepted so a described job reads back, and ignored."""

    name: str | None = None
    state: str | None = None
    create_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    update_time: str | None = None
    error: dict | None = None
    satisfies_pzs: bool | None = None
    satisfies_pzi: bool | None = None


class CustomJob(VertexJobOutput):
    display_name: str | None = None
    job_spec: CustomJobSpec
    labels: dict[str, str] | None = None
    encryption_spec: dict | None = None
    web_access_uris: dict | None = None  # output only


class SdkJob(CamelModel):
    """``aiplatform.CustomJob(display_name=..., worker_pool_specs=..., base_output_dir=...)`` arguments."""

    display_name: str | None = None
    worker_pool_specs: Many[WorkerPoolSpec | None]
    base_output_dir: str | None = None


# Settings that do not apply locally and have no native home: (attribute, kind).
_JOB_DROPPED = (
    ("service_account", "network"),
    ("network", "network"),
    ("reserved_ip_ranges", "network"),
    ("psc_interface_config", "network"),
    ("protected_artifact_location_id", "network"),
    ("persistent_resource_id", "scheduling"),
    ("tensorboard", "tracking"),
    ("enable_web_access", "tracking"),
    ("enable_dashboard_access", "tracking"),
    ("experiment", "tracking"),
    ("experiment_run", "tracking"),
    ("models", "tracking"),
)
_MACHINE_KEYS = ("machine_type", "accelerator_type", "accelerator_count", "gpu_partition_size", "tpu_topology")


def parse(data: Any, *, source: str, path: Path | None = None) -> Parsed:
    """Read any of the three Vertex shapes into a native spec dict."""
    style = "snake" if isinstance(data, list) or (isinstance(data, dict) and "worker_pool_specs" in data) else "camel"
    key = to_snake if style == "snake" else str
    parsed = Parsed(format="vertex", native={})
    output = None
    if isinstance(data, list):
        items = [
            None if item is None else validate(WorkerPoolSpec, item, source=source, prefix=f"[{i}]", style=style)
            for i, item in enumerate(data)
        ]
        spec = CustomJobSpec(worker_pool_specs=items)
        name, prefix = None, ""
        pools_field = ""
    elif isinstance(data, dict) and "worker_pool_specs" in data and "job_spec" not in data:
        sdk = validate(SdkJob, data, source=source, style=style)
        spec = CustomJobSpec(worker_pool_specs=sdk.worker_pool_specs)
        name, prefix, output = sdk.display_name, "", sdk.base_output_dir
        pools_field = "worker_pool_specs"
        if output:
            parsed.origins["output_dir"] = "base_output_dir"
    elif isinstance(data, dict) and ("jobSpec" in data or "job_spec" in data):
        custom_job = validate(CustomJob, data, source=source, style=style)
        spec, name, prefix = custom_job.job_spec, custom_job.display_name, key("jobSpec")
        pools_field = f"{prefix}.{key('workerPoolSpecs')}"
        if custom_job.labels:
            parsed.drop("tracking", key("labels"))
        if custom_job.encryption_spec:
            parsed.drop("network", key("encryptionSpec"))
    else:
        spec = validate(CustomJobSpec, data, source=source, style=style)
        name, prefix = None, ""
        pools_field = key("workerPoolSpecs")
    dot = f"{prefix}." if prefix else ""

    pools = _pools(parsed, spec.worker_pool_specs, source=source, field=pools_field, key=key)
    job: dict[str, Any] = {}
    if spec.base_output_directory is not None:
        output = spec.base_output_directory.output_uri_prefix
        parsed.origins["output_dir"] = f"{dot}{key('baseOutputDirectory')}.{key('outputUriPrefix')}"
    if output:
        job["output_dir"] = output
    run_policy = _run_policy(parsed, spec.scheduling, source=source, field=f"{dot}{key('scheduling')}", key=key)
    if run_policy:
        job["run_policy"] = run_policy
    for attr, kind in _JOB_DROPPED:
        if getattr(spec, attr) not in (None, False, [], {}):
            parsed.drop(kind, f"{dot}{key(to_camel(attr))}")
    frameworks = {p.pop("framework") for p in pools.values() if "framework" in p}
    if frameworks:
        job["framework"] = frameworks.pop()
    return finish(parsed, job_name(name, path), pools, job)


def _pools(parsed: Parsed, specs: list, *, source: str, field: str, key) -> dict[str, dict]:
    at = (lambda i: f"{field}[{i}]") if field else (lambda i: f"[{i}]")
    if not specs or not _present(specs[0]):
        raise SpecError(
            "pool 0 (the chief) is missing; the first worker pool is the primary replica: give it "
            "a containerSpec or pythonPackageSpec and replicaCount: 1",
            source=source,
            field=at(0),
        )
    if len(specs) > len(POOL_ROLES):
        raise SpecError(
            f"{len(specs)} worker pools; Vertex AI has at most 4 (chief, workers, parameter servers, evaluators)",
            source=source,
            field=at(len(POOL_ROLES)),
        )
    pools: dict[str, dict] = {}
    for i, pool in enumerate(specs):
        if not _present(pool):
            continue
        role = POOL_ROLES[i]
        replicas = 1 if pool.replica_count is None else pool.replica_count
        where = at(i)
        if role != "chief" and replicas == 0:
            continue
        if role == "chief" and replicas != 1:
            raise SpecError(
                f"{key('replicaCount')} is {replicas}; pool 0 is the chief and has exactly one replica. "
                f"Set it to 1 and put the other replicas in pool 1 (workers)",
                source=source,
                field=f"{where}.{key('replicaCount')}",
            )
        if replicas < 0:
            raise SpecError(f"is {replicas}; it must be 0 or more", source=source, field=f"{where}.{key('replicaCount')}")
        pools[role] = _pool(parsed, role, pool, replicas, source=source, where=where, key=key)
    return pools


def _present(pool) -> bool:
    return pool is not None and bool(pool.model_fields_set)


def _pool(parsed: Parsed, role: str, pool: WorkerPoolSpec, replicas: int, *, source: str, where: str, key) -> dict:
    container, package = pool.container_spec, pool.python_package_spec
    if container and package:
        raise SpecError(
            f"has both {key('containerSpec')} and {key('pythonPackageSpec')}; keep one",
            source=source,
            field=where,
        )
    if not container and not package:
        raise SpecError(
            f"needs a {key('containerSpec')} or a {key('pythonPackageSpec')}", source=source, field=where
        )
    out: dict[str, Any] = {"replicas": replicas}
    if container:
        spec_field = f"{where}.{key('containerSpec')}"
        out["image"] = container.image_uri
        command = container.command
        if command and list(command[:len(VERTEX_ENTRY)]) == VERTEX_ENTRY:  # written for a JAX or PyTorch job
            command = command[len(VERTEX_ENTRY):]
        out.update(program_of(command, container.args))
        if container.command and "module" not in out:
            parsed.origins[f"pools.{role}.command"] = f"{spec_field}.command"
        env = container.env
    elif package:
        spec_field = f"{where}.{key('pythonPackageSpec')}"
        out["image"] = package.executor_image_uri
        out["module"] = package.python_module
        out["args"] = list(package.args or [])
        env = package.env
        uris_field = f"{spec_field}.{key('packageUris')}"
        parsed.packages[role] = [(uri, f"{uris_field}[{j}]") for j, uri in enumerate(package.package_uris)]
    parsed.origins[f"pools.{role}.args"] = f"{spec_field}.args"
    out["env"] = {}
    for j, var in enumerate(env or []):
        if var.name in ("MW_FRAMEWORK", "MW_TORCHRUN"):  # the framework entry's own: the spec's framework
            if var.name == "MW_FRAMEWORK":
                out["framework"] = var.value
            continue
        out["env"][var.name] = var.value
        parsed.origins[f"pools.{role}.env.{var.name}"] = f"{spec_field}.env[{j}].value"
    machine = _machine(pool)
    if machine:
        out["machine"] = machine
        for part in ("machineSpec", "diskSpec"):
            if getattr(pool, to_snake(part)) is not None:
                parsed.keep("machine", f"{where}.{key(part)}")
    if pool.machine_spec and pool.machine_spec.reservation_affinity:
        parsed.drop("scheduling", f"{where}.{key('machineSpec')}.{key('reservationAffinity')}")
    for mounts in ("nfsMounts", "lustreMounts"):
        if getattr(pool, to_snake(mounts)):
            parsed.drop("storage", f"{where}.{key(mounts)}")
    return out


def _machine(pool: WorkerPoolSpec) -> dict:
    out: dict[str, Any] = {}
    if pool.machine_spec:
        for name in _MACHINE_KEYS:
            value = getattr(pool.machine_spec, name)
            if value is not None:
                out[name] = value
    if pool.disk_spec:
        if pool.disk_spec.boot_disk_type:
            out["boot_disk_type"] = pool.disk_spec.boot_disk_type
        if pool.disk_spec.boot_disk_size_gb is not None:
            out["boot_disk_size_gb"] = pool.disk_spec.boot_disk_size_gb
    return out


def _run_policy(parsed: Parsed, scheduling: Scheduling | None, *, source: str, field: str, key) -> dict:
    """Vertex restarts a job only after system failures (a kill, a preemption): ExitCode, or Never."""
    out: dict[str, Any] = {"restart_policy": "ExitCode"}
    if scheduling is None:
        return out
    if scheduling.timeout:
        try:
            out["active_deadline"] = parse_duration(scheduling.timeout)
        except ValueError as exc:
            raise SpecError(str(exc), source=source, field=f"{field}.timeout") from None
    if scheduling.disable_retries:
        out["restart_policy"] = "Never"
    if scheduling.restart_job_on_worker_restart is False:
        parsed.notes.append(
            f"{field}.{key('restartJobOnWorkerRestart')} is false, but a local job always restarts "
            "its whole group when a replica fails"
        )
    for attr in ("max_wait_duration", "strategy"):
        if getattr(scheduling, attr):
            parsed.drop("scheduling", f"{field}.{key(to_camel(attr))}")
    return out


