"""The object a job becomes on Kubernetes (JobSet or TFJob), and the refusals before it is created."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from multiworker.errors import SpecError, UserError
from multiworker.spec.formats.schema import check_schema
from multiworker.spec.formats.target import Target
from multiworker.spec.model import JobSpec

__all__ = ["object_name", "build", "check_paths", "API_CHOICES"]

API_CHOICES = ("jobset", "tfjob")
_ID_LABEL = "multiworker.io/job-id"


def object_name(spec: JobSpec, job_id: str) -> str:
    """``<job name>-<job id prefix>``: a DNS-1035 label, unique per run of the same spec."""
    base = re.sub(r"[^a-z0-9-]+", "-", spec.name.lower()).strip("-")
    base = base if base[:1].isalpha() else f"job-{base}".rstrip("-")
    return f"{base[:40].rstrip('-')}-{job_id[:6]}"


def build(spec: JobSpec, options: dict[str, Any], *, job_id: str, source: str) -> tuple[dict, list[str]]:
    """The manifest for ``spec`` (named ``object_name``), validated against the vendored CRD; and notes."""
    from multiworker.spec.formats import jobset as to_jobset
    from multiworker.spec.formats import tfjob as to_tfjob

    api = options.get("kubernetes_api") or "jobset"
    if api not in API_CHOICES:
        raise UserError(f"--kubernetes-api {api!r}: choose jobset or tfjob")
    named = spec.model_copy(update={"name": object_name(spec, job_id)})
    target = Target(spec=named, to=api, source=source, image=options.get("image"))
    doc = (to_jobset.write if api == "jobset" else to_tfjob.write)(target)
    doc["metadata"]["labels"] = {"app.kubernetes.io/managed-by": "multiworker", _ID_LABEL: job_id}
    if options.get("namespace"):
        doc["metadata"]["namespace"] = options["namespace"]
    check_schema(doc, api, source=source)
    notes = [n for n in target.notes if not n.startswith("name ")]
    if spec.output_dir is None:
        notes.append("no output_dir: the model stays inside the pods; set output_dir: gs://BUCKET/PATH to keep it")
    return doc, notes


def check_paths(spec: JobSpec, base_dir: Path, *, source: str) -> None:
    """Refuse local paths a pod cannot see: an output dir here, or args/env naming files next to the spec."""
    if spec.output_dir and not (spec.output_dir.startswith("gs://") or spec.output_dir.startswith("/")):
        raise SpecError(f"{spec.output_dir} is a local path the pods cannot see; use gs://BUCKET/PATH or an "
                        "absolute path mounted in the pod", source=source, field="output_dir")
    for role in spec.replica_counts():
        program = spec.resolved(role)
        values = [(f"pools.{role}.args[{i}]", a) for i, a in enumerate(program.args or [])]
        values += [(f"pools.{role}.env.{k}", v) for k, v in (program.env or {}).items()]
        for field, value in values:
            path = value.partition("=")[2] if value.startswith("-") and "=" in value else value
            if _local_path(path, base_dir):
                raise SpecError(f"{path} is a file on this machine the pods cannot see; put it in the image or "
                                "on gs://BUCKET and pass that path", source=source, field=field)


def _local_path(value: str, base_dir: Path) -> bool:
    if not value or value.startswith(("gs://", "s3://", "http://", "https://", "/", "-")) or "://" in value:
        return False
    if value.startswith(("./", "../", "~/")):
        return True
    return "/" in value and (base_dir / value).exists()
