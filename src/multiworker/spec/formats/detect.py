"""Tell a job file's format from its top-level shape."""

from __future__ import annotations

import difflib
from typing import Any

from multiworker.errors import SpecError

__all__ = ["FORMATS", "detect"]

FORMATS = ("native", "vertex", "aiplatform", "tfjob", "jobset")

_VERTEX_KEYS = {"workerPoolSpecs", "worker_pool_specs", "jobSpec", "job_spec"}
_AIPLATFORM_KEYS = {
    "trainingInput", "training_input", "scaleTier", "masterType", "masterConfig", "pythonModule", "packageUris",
    "workerCount", "parameterServerCount", "useChiefInTfConfig",
}
_NATIVE_KEYS = {"name", "pools", "module", "command", "run_policy"}


def detect(data: Any, *, source: str | None = None) -> str:
    """``native``, ``vertex``, ``aiplatform``, ``tfjob`` or ``jobset``; any other mapping is read as native."""
    if isinstance(data, list) and data and all(item is None or isinstance(item, dict) for item in data):
        return "vertex"  # the Python SDK's worker_pool_specs list
    if not isinstance(data, dict):
        return "native"  # whose loader says what a spec looks like
    kind = data.get("kind")
    if kind is not None or "apiVersion" in data:
        if kind == "TFJob":
            return "tfjob"
        if kind == "JobSet":
            return "jobset"
        raise SpecError(
            f"kind {kind!r} is not supported; multiworker reads Kubeflow `kind: TFJob` and `kind: JobSet` manifests",
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
    if not keys & _NATIVE_KEYS:
        for key in sorted(map(str, keys)):
            for markers, name in ((_VERTEX_KEYS, "Vertex AI"), (_AIPLATFORM_KEYS, "AI Platform")):
                hint = difflib.get_close_matches(key, sorted(markers), n=1, cutoff=0.8)
                if hint:
                    raise SpecError(f"unknown key `{key}`; did you mean `{hint[0]}` ({name})?", source=source,
                                    field=key)
    return "native"
