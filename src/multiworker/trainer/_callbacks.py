"""The callbacks every multi-worker trainer wants, wired to the replica's role and directories."""

from __future__ import annotations

import logging
from typing import Any

from multiworker.trainer import _fs
from multiworker.trainer._backup_policy import parse_backup_every
from multiworker.trainer._context import Context, context

logger = logging.getLogger(__name__)

__all__ = ["BACKUP_SUBDIR", "callbacks"]

#: BackupAndRestore's directory under checkpoint_dir; per-epoch checkpoints sit in checkpoint_dir.
BACKUP_SUBDIR = "backup"


def _tensorboard_ok() -> bool:
    if _fs.tensorboard_available():
        return True
    logger.warning("TensorBoard logging off: the tensorboard package is not installed "
                   "(pip install 'tensorboard==2.21.*')")
    return False


def callbacks(
    global_batch_size: int | None = None,
    *,
    ctx: Context | None = None,
    backup: bool = True,
    backup_every: str | int | float | None = "auto",
    checkpoints: bool = True,
    tensorboard: bool = True,
    metrics: bool = True,
    max_checkpoints: int = 3,
    progress_interval: float = 2.0,
) -> list[Any]:
    """Callbacks for ``model.fit``, in the order they must run.

    - BackupAndRestore into ``<checkpoint_dir>/backup``: a restarted group resumes where the last
      backup left it. ``backup_every``: "auto" (about every 2 s of training, stretched so saving
      costs at most 1.5% of it), "epoch", a number of steps, or seconds ("10s"); see
      :func:`multiworker.trainer._backup_policy.parse_backup_every`;
    - per-epoch checkpoints ``<checkpoint_dir>/ckpt-<epoch>`` for an evaluator replica (kept
      always: evaluators are configuration, and the chief cannot see them in TF_CONFIG);
    - ``progress``/``epoch`` metric lines (chief only; pass the global batch size for images/s);
    - TensorBoard into ``tensorboard_dir`` (chief only; skipped with a warning when the
      tensorboard package is missing).
    """
    import tf_keras as keras

    from multiworker.trainer._backup import backup_callback
    from multiworker.trainer._keras_callbacks import EpochCheckpoint, MetricsReporter

    schedule = parse_backup_every(backup_every)
    ctx = ctx or context()
    result: list[Any] = []
    if backup:
        result.append(backup_callback(_fs.join(ctx.checkpoint_dir, BACKUP_SUBDIR), schedule,
                                      parameter_server=ctx.has_ps))
    if checkpoints:
        result.append(EpochCheckpoint(ctx.checkpoint_dir, is_chief=ctx.is_chief, max_to_keep=max_checkpoints))
    if metrics and ctx.is_chief:
        result.append(MetricsReporter(global_batch_size, interval=progress_interval))
    if tensorboard and ctx.is_chief and _tensorboard_ok():
        result.append(keras.callbacks.TensorBoard(log_dir=ctx.tensorboard_dir, histogram_freq=0,
                                                  write_graph=False, profile_batch=0))
    return result
