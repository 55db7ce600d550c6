"""Who this replica is and where it writes: a frozen snapshot of the environment contract."""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from multiworker.trainer import _env

logger = logging.getLogger(__name__)

__all__ = ["Context", "context"]


@dataclass(frozen=True)
class Context:
    """This replica's role in the cluster and the job's directories.

    A lone replica (no TF_CONFIG, as TFJob and Vertex AI run single-replica jobs) is its own
    chief. Under ParameterServerStrategy the chief is the coordinator.
    """

    task_type: str
    task_index: int
    cluster: Mapping[str, list[str]] = field(hash=False)
    num_workers: int
    is_chief: bool
    has_ps: bool
    is_ps: bool
    is_evaluator: bool
    output_dir: str
    model_dir: str
    checkpoint_dir: str
    tensorboard_dir: str
    job_id: str | None = None
    attempt: int = 0
    threads: int | None = None

    @property
    def is_distributed(self) -> bool:
        """True when TF_CONFIG describes a cluster of more than one training task or has ps."""
        return self.num_workers > 1 or self.has_ps

    @property
    def runs_server_only(self) -> bool:
        """True for ps replicas and, under ParameterServerStrategy, worker replicas: they only serve."""
        return self.is_ps or (self.has_ps and self.task_type == "worker")

    @property
    def name(self) -> str:
        """``<task_type>-<task_index>``, the replica's name in logs."""
        return f"{self.task_type}-{self.task_index}"


def context(environ: Mapping[str, str] | None = None, **overrides: Any) -> Context:
    """Read the replica environment into a :class:`Context`; keyword arguments override fields.

    Overrides let a trainer run by hand pick its directories, e.g.
    ``context(output_dir="/tmp/run1")`` (the other directories then follow it unless given).
    """
    unknown = set(overrides) - {f.name for f in dataclasses.fields(Context)}
    if unknown:
        raise TypeError(f"context() got unknown override(s) {sorted(unknown)}")
    environ = os.environ if environ is None else environ
    config = _env.read_tf_config(environ)
    cluster = {k: list(v) for k, v in (config.get("cluster") or {}).items()}
    task = config.get("task") or {}
    training_tasks = sum(len(cluster.get(t, [])) for t in _env.TRAINING_TYPES)
    if task:
        task_type = str(task.get("type") or "worker")
        task_index = int(task.get("index") or 0)
    else:
        task_type, task_index = "chief", 0
    has_chief = bool(cluster.get("chief"))
    is_chief = task_type == "chief" or (task_type == "worker" and task_index == 0 and not has_chief)

    env_for_dirs = dict(environ)
    if "output_dir" in overrides:
        env_for_dirs["MULTIWORKER_OUTPUT_DIR"] = str(overrides["output_dir"])
        for key in ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
            env_for_dirs.pop(key, None)
    dirs = _env.output_dirs(env_for_dirs)

    ctx = Context(
        task_type=task_type,
        task_index=task_index,
        cluster=cluster,
        num_workers=max(training_tasks, 1),
        is_chief=is_chief,
        has_ps=bool(cluster.get("ps")),
        is_ps=task_type == "ps",
        is_evaluator=task_type == "evaluator",
        job_id=environ.get("MULTIWORKER_JOB_ID") or None,
        attempt=_env.env_int("MULTIWORKER_ATTEMPT", environ) or 0,
        threads=_env.env_int("MULTIWORKER_THREADS", environ),
        **dirs,
    )
    return dataclasses.replace(ctx, **{k: v for k, v in overrides.items() if k != "output_dir"},
                               output_dir=dirs["output_dir"])
