"""The TRAINING_DONE marker: how replicas that do not train learn that training has finished.

The chief writes ``<output_dir>/TRAINING_DONE`` (JSON: job_id, attempt, time, final checkpoint)
after ``model.fit`` returns. The evaluator then evaluates the final checkpoint and exits, and
parameter-server-mode servers exit once the chief has also gone. It is a plain file in the job's
output directory, so it works the same on a local disk and on gs:// (Vertex AI).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

from multiworker.trainer import _fs
from multiworker.trainer._context import Context, context

logger = logging.getLogger(__name__)

DONE_MARKER = "TRAINING_DONE"

__all__ = ["DONE_MARKER", "clear_training_done", "done_marker_path", "mark_training_done", "training_done"]


def done_marker_path(ctx: Context | None = None) -> str:
    """Where the chief writes the marker: ``<output_dir>/TRAINING_DONE``."""
    ctx = ctx or context()
    return _fs.join(ctx.output_dir, DONE_MARKER)


def _latest_checkpoint(directory: str) -> str | None:
    import tensorflow as tf

    return tf.train.latest_checkpoint(directory)


def mark_training_done(ctx: Context | None = None, **extra: Any) -> str | None:
    """Chief only: record that training finished (with the final checkpoint). Returns the path."""
    ctx = ctx or context()
    if not ctx.is_chief:
        return None
    path = done_marker_path(ctx)
    record = {
        "job_id": ctx.job_id,
        "attempt": ctx.attempt,
        "time": time.time(),
        "task": ctx.name,
        "final_checkpoint": _latest_checkpoint(ctx.checkpoint_dir),
        **extra,
    }
    _fs.write_json_atomic(path, record)
    logger.info("training done: wrote %s", path)
    return path


def clear_training_done(ctx: Context | None = None) -> None:
    """Chief only, at start: remove a marker left by an earlier run into the same directory."""
    ctx = ctx or context()
    if ctx.is_chief:
        path = done_marker_path(ctx)
        if _fs.exists(path):
            logger.info("removing stale %s", path)
            _fs.remove(path)


def training_done(ctx: Context | None = None, *, since: float | None = None) -> dict[str, Any] | None:
    """The marker's record if training of *this* job is done, else None.

    A marker from another job is ignored: its job_id differs (when both are known) or, without
    job ids, it was written before ``since`` (this replica's start time, typically).
    """
    ctx = ctx or context()
    text = _fs.read_text(done_marker_path(ctx))
    if text is None:
        return None
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return None  # being written by a non-atomic (remote) writer; look again later
    if ctx.job_id and record.get("job_id"):
        return record if record["job_id"] == ctx.job_id else None
    if since is not None and float(record.get("time") or 0) < since:
        return None
    return record
