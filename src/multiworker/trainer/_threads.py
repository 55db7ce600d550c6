"""The launcher's thread budget (MULTIWORKER_THREADS, TF_NUM_*_THREADS) applied to TensorFlow once
per process, by training replicas and servers alike."""

from __future__ import annotations

import logging

from multiworker.trainer import _env

logger = logging.getLogger(__name__)

__all__ = ["configure_threads"]

_threads_done = False


def configure_threads() -> tuple[int | None, int | None]:
    """Apply the launcher's thread budget (MULTIWORKER_THREADS, TF_NUM_*_THREADS) to TensorFlow.

    Must run before TensorFlow initializes its runtime; later it only logs a warning.
    """
    global _threads_done
    intra, inter = _env.thread_budget()
    if _threads_done or (intra is None and inter is None):
        return intra, inter
    import tensorflow as tf

    try:
        if intra:
            tf.config.threading.set_intra_op_parallelism_threads(intra)
        if inter:
            tf.config.threading.set_inter_op_parallelism_threads(inter)
        logger.info("threads: intra-op %s, inter-op %s", intra, inter)
    except RuntimeError as exc:
        logger.warning("thread budget not applied (TensorFlow already initialized): %s", exc)
    _threads_done = True
    return intra, inter
