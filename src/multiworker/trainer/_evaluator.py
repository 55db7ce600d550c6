"""The evaluator replica's loop: evaluate each new checkpoint until training is done, then the last.

The chief saves ``<checkpoint_dir>/ckpt-<epoch>`` every epoch (see :func:`callbacks`) and writes
TRAINING_DONE when ``fit`` returns; this loop follows both, so an evaluator pool needs no code
of its own. Results go to TensorBoard (``<tensorboard_dir>/eval``, named like Keras's epoch
scalars so they overlay the training curves), to ``eval`` metric lines, and to
``<output_dir>/eval_metrics.json``.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from multiworker.trainer import _env, _fs
from multiworker.trainer._context import Context, context
from multiworker.trainer._markers import training_done
from multiworker.trainer._report import emit

logger = logging.getLogger(__name__)

__all__ = ["EVAL_METRICS_FILE", "run_evaluator"]

EVAL_METRICS_FILE = "eval_metrics.json"
_NUMBER = re.compile(r"-(\d+)$")


def _checkpoint_number(path: str) -> int | None:
    match = _NUMBER.search(path)
    return int(match.group(1)) if match else None


class _Evaluator:
    """Restores one checkpoint at a time into ``model`` and records what it scores."""

    def __init__(self, model: Any, data: Any, steps: int | None, ctx: Context):
        import tensorflow as tf

        self.tf = tf
        self.model, self.data, self.steps, self.ctx = model, data, steps, ctx
        self.checkpoint = tf.train.Checkpoint(model=model)
        self.writer = None
        if _fs.tensorboard_available():
            self.writer = tf.summary.create_file_writer(_fs.join(ctx.tensorboard_dir, "eval"))
        self.history: list[dict[str, Any]] = []

    def evaluate(self, path: str) -> dict[str, Any] | None:
        tf = self.tf
        try:
            self.checkpoint.restore(path).expect_partial()
        except (tf.errors.NotFoundError, ValueError) as exc:  # pruned by the chief meanwhile
            logger.warning("skipping checkpoint %s: %s", path, exc)
            return None
        start = time.monotonic()
        results = self.model.evaluate(self.data, steps=self.steps, verbose=0, return_dict=True)
        epoch = _checkpoint_number(path)
        optimizer = getattr(self.model, "optimizer", None)
        step = int(optimizer.iterations.numpy()) if optimizer is not None else None
        record = {"checkpoint": path, "epoch": epoch, "step": step,
                  **{k: float(v) for k, v in results.items()},
                  "seconds": round(time.monotonic() - start, 3)}
        if self.writer is not None:
            with self.writer.as_default():
                for name, value in results.items():
                    tf.summary.scalar(f"epoch_{name}", float(value), step=epoch if epoch is not None else step or 0)
            self.writer.flush()
        emit("eval", **record)
        self.history.append(record)
        _fs.write_json_atomic(_fs.join(self.ctx.output_dir, EVAL_METRICS_FILE),
                              {**record, "history": self.history})
        logger.info("evaluated %s: %s", path, results)
        return record


def run_evaluator(
    model: Any,
    data: Any,
    *,
    steps: int | None = None,
    ctx: Context | None = None,
    checkpoint_dir: str | None = None,
    poll_seconds: float = 2.0,
    timeout: float | None = None,
) -> dict[str, Any] | None:
    """Evaluate ``model`` (built and compiled like the trainer's) on ``data`` at every new checkpoint.

    Returns once the chief has marked training done (or ``timeout`` seconds passed) and the
    final checkpoint has been evaluated; the result is that last evaluation (None if there was
    no checkpoint at all).
    """
    import tensorflow as tf

    ctx = ctx or context()
    directory = checkpoint_dir or ctx.checkpoint_dir
    started = time.time()
    evaluator = _Evaluator(model, data, steps, ctx)

    def finished() -> bool:
        if timeout is not None and time.time() - started > timeout:
            logger.warning("evaluator timed out after %.0f s", timeout)
            return True
        return training_done(ctx, since=_env.IMPORTED_AT - 5) is not None

    logger.info("evaluator watching %s", directory)
    for path in tf.train.checkpoints_iterator(directory, min_interval_secs=poll_seconds,
                                              timeout=poll_seconds, timeout_fn=finished):
        evaluator.evaluate(path)
    final = tf.train.latest_checkpoint(directory)
    evaluated = {r["checkpoint"] for r in evaluator.history}
    if final and final not in evaluated:
        evaluator.evaluate(final)
    return evaluator.history[-1] if evaluator.history else None
