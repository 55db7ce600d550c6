"""Chief-only outputs written atomically: the SavedModel and metrics.json."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from typing import Any

from multiworker import staging
from multiworker.trainer import _fs
from multiworker.trainer._context import Context, context
from multiworker.trainer._report import emit

logger = logging.getLogger(__name__)

__all__ = ["save_model", "write_metrics_json"]


def save_model(model: Any, *, ctx: Context | None = None, path: str | None = None, **save_kwargs: Any) -> str:
    """Save ``model`` as a SavedModel at ``path`` (default: model_dir) and return that path.

    Every training replica must call this (saving runs collectives under
    MultiWorkerMirroredStrategy). The chief writes into a temporary sibling and renames it into
    place, so the directory is never half-written; the others save into a local temporary
    directory that is removed at once. On gs:// the chief writes in place (no atomic rename).
    """
    ctx = ctx or context()
    target = path or ctx.model_dir
    save_kwargs.setdefault("save_format", "tf")
    if not ctx.is_chief:
        scratch = tempfile.mkdtemp(prefix="multiworker-model-")
        try:
            model.save(os.path.join(scratch, "model"), **save_kwargs)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return target
    if _fs.is_remote(target):
        model.save(target, **save_kwargs)
        logger.info("saved model to %s", target)
        return target
    target = os.path.abspath(target)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    staging.remove_stale_siblings(target)  # a save a kill interrupted (SIGKILL runs no cleanup)
    tmp = _fs.temp_sibling(target, "tmp")
    try:
        model.save(tmp, **save_kwargs)
        _fs.publish_dir(tmp, target)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
        staging.done(tmp)
    logger.info("saved model to %s", target)
    return target


def write_metrics_json(metrics: dict[str, Any], *, ctx: Context | None = None,
                       filename: str = "metrics.json") -> str | None:
    """Chief only: write ``<output_dir>/<filename>`` atomically and emit a ``final`` metric line.

    Returns the path written, or None on other replicas (which may call it too).
    """
    ctx = ctx or context()
    if not ctx.is_chief:
        return None
    path = _fs.join(ctx.output_dir, filename)
    _fs.write_json_atomic(path, metrics)
    emit("final", **metrics)
    logger.info("wrote %s", path)
    return path
