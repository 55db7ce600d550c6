"""Tell a job file's format from its top-level shape."""

from __future__ import annotations

from typing import Any

from multiworker.errors import SpecError

__all__ = ["FORMATS", "detect"]

FORMATS = ("native", "vertex", "aiplatform", "tfjob")

_VERTEX_KEYS = {"workerPoolSpecs", "worker_pool_specs", "jobSpec", "job_spec"}
_AIPLATFORM_KEYS = {
    "trainingInput", "training_input", "scaleTier", "masterType", "masterConfig", "pythonModule", "packageUris",
    "workerCount", "parameterServerCount", "useChiefInTfConfig",
}
_NATIVE_KEYS = {"pools", "module", "command"}


def detect(data: Any, *, source: str | None = None) -> str:
    """``native``, ``vertex``, ``aiplatform`` or ``tfjob``; a SpecError when no shape fits."""
    if isinstance(data, list):
        if data and all(item is None or isinstance(item, dict) for item in data):
            return "vertex"  # the Python SDK's worker_pool_specs list
    elif isinstance(data, dict):
        kind = data.get("kind")
        if kind is not None or "apiVersion" in data:
            if kind == "TFJob":
                return "tfjob"
            raise SpecError(
                f"kind {kind!r} is not supported; multiworker reads Kubeflow `kind: TFJob` manifests",
                source=source,
                field="kind",
            )
        keys = set(data)
        if isinstance(data.get("spec"), dict) and "tfReplicaSpecs" in data["spec"]:
            return "tfjob"
        if keys & _VERTEX_KEYS:
            return "vertex"
        if keys & _AIPLATFORM_KEYS:
            return "aiplatform"
        if keys & _NATIVE_KEYS:
            return "native"
    raise SpecError(
        "cannot tell the format: expected `pools` (native), `workerPoolSpecs` (Vertex AI), `trainingInput` "
        "(AI Platform) or `kind: TFJob`; pass --format native|vertex|aiplatform|tfjob",
        source=source,
    )
