"""Reading the replica environment contract (TF_CONFIG, AIP_*, MULTIWORKER_*): standard library only.

Everything the trainer library knows about its replica comes from here, so the same trainer
runs under `multiworker run`, Kubeflow TFJob and Vertex AI unchanged.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from multiworker.trainer._fs import is_remote, join

logger = logging.getLogger(__name__)

#: When this process imported the trainer library: markers older than this are from another run.
IMPORTED_AT = time.time()

#: Task types that run the user's training loop in lock step (MultiWorkerMirroredStrategy).
TRAINING_TYPES = ("chief", "worker")


def _env(name: str, environ: Mapping[str, str]) -> str | None:
    value = environ.get(name)
    return value if value else None


def env_int(name: str, environ: Mapping[str, str] | None = None) -> int | None:
    """An integer environment variable, or None when absent, empty or not a positive integer."""
    raw = _env(name, os.environ if environ is None else environ)
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        logger.warning("ignoring %s=%r: not an integer", name, raw)
        return None
    return value if value > 0 else None


def read_tf_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """TF_CONFIG as a dict with the legacy task type "master" renamed "chief"; {} when unset.

    AI Platform's legacy configs say "master"; TensorFlow's strategies only know "chief".
    """
    environ = os.environ if environ is None else environ
    raw = _env("TF_CONFIG", environ)
    if raw is None:
        return {}
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"TF_CONFIG is not valid JSON ({exc}): {raw[:200]!r}") from exc
    if not isinstance(config, dict):
        raise ValueError(f"TF_CONFIG must be a JSON object, got {type(config).__name__}")
    cluster = dict(config.get("cluster") or {})
    if "master" in cluster:
        cluster["chief"] = list(cluster.get("chief") or []) + list(cluster.pop("master"))
    task = dict(config.get("task") or {})
    if task.get("type") == "master":
        task["type"] = "chief"
    return {**config, "cluster": cluster, "task": task}


def export_normalized_tf_config() -> None:
    """Rewrite os.environ["TF_CONFIG"] with "master" renamed "chief", for TensorFlow's own readers."""
    raw = os.environ.get("TF_CONFIG")
    if raw and '"master"' in raw:
        os.environ["TF_CONFIG"] = json.dumps(read_tf_config())
        logger.info("TF_CONFIG: renamed task type 'master' to 'chief'")


def _absolute(path: str, cwd: str) -> str:
    return path if is_remote(path) else os.path.normpath(os.path.join(cwd, path))


def _parent(path: str) -> str:
    path = path.rstrip("/")
    return path.rsplit("/", 1)[0] if "/" in path else "."


def output_dirs(environ: Mapping[str, str] | None = None, cwd: str | None = None) -> dict[str, str]:
    """The job's output, model, checkpoint and TensorBoard directories.

    Follows Vertex AI's layout (``<base>/model``, ``<base>/checkpoints``, ``<base>/logs``): the
    output directory is MULTIWORKER_OUTPUT_DIR, else the parent of AIP_MODEL_DIR when that ends
    in ``/model``, else ``<cwd>/outputs``; each AIP_* variable overrides its own directory.
    """
    environ = os.environ if environ is None else environ
    cwd = os.getcwd() if cwd is None else cwd
    model_env = _env("AIP_MODEL_DIR", environ)
    output = _env("MULTIWORKER_OUTPUT_DIR", environ)
    if output is None and model_env is not None and model_env.rstrip("/").endswith("/model"):
        output = _parent(model_env)
    if output is None:
        output = os.path.join(cwd, "outputs")
    output = _absolute(output, cwd)
    return {
        "output_dir": output,
        "model_dir": _absolute(model_env or join(output, "model"), cwd),
        "checkpoint_dir": _absolute(_env("AIP_CHECKPOINT_DIR", environ) or join(output, "checkpoints"), cwd),
        "tensorboard_dir": _absolute(_env("AIP_TENSORBOARD_LOG_DIR", environ) or join(output, "logs"), cwd),
    }


def thread_budget(environ: Mapping[str, str] | None = None) -> tuple[int | None, int | None]:
    """(intra-op, inter-op) thread counts the launcher asked for, None where it set nothing."""
    environ = os.environ if environ is None else environ
    budget = env_int("MULTIWORKER_THREADS", environ)
    intra = env_int("TF_NUM_INTRAOP_THREADS", environ) or budget
    inter = env_int("TF_NUM_INTEROP_THREADS", environ) or budget
    return intra, inter
