"""One all-reduce per step for a model's mean and sum metrics under MultiWorkerMirroredStrategy.

Keras reads each metric's result across workers every step: a metric's ``total`` and ``count``
are SyncOnRead variables, and reading each one in cross-replica context is its own collective
(about 2 ms each with one thread per worker, four for loss and accuracy; BENCHMARKS.md). For
metrics whose result is ``total / count`` or ``total`` (tf-keras's ``Reduce``: Mean, Sum, the
loss tracker, accuracy and every ``MeanMetricWrapper``), the same numbers come from summing the
local variables of all of them in one all-reduce. Other metrics keep their own ``result()``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["sync_metrics_in_one_all_reduce"]


def _reduce_class(keras: Any) -> type:
    """tf-keras's ``Reduce`` (the base of Mean and Sum; not exported by name)."""
    return next((c for c in keras.metrics.Mean.__mro__ if c.__name__ == "Reduce"), keras.metrics.Mean)


def _reducible(metric: Any, reduce_cls: type) -> bool:
    return isinstance(metric, reduce_cls) and type(metric).result is reduce_cls.result


def sync_metrics_in_one_all_reduce(model: Any) -> bool:
    """Give ``model`` a ``get_metrics_result`` that syncs its Reduce metrics in one all-reduce.

    Only under MultiWorkerMirroredStrategy, and only when the model's class keeps Keras's own
    ``get_metrics_result`` (a model that overrides it is left alone). Returns whether it did.
    Results are the same values Keras's per-variable reads give (sums of the workers' totals over
    sums of their counts).
    """
    import tensorflow as tf
    import tf_keras as keras

    if not isinstance(getattr(model, "distribute_strategy", None), tf.distribute.MultiWorkerMirroredStrategy):
        return False
    if type(model).get_metrics_result is not keras.Model.get_metrics_result or "get_metrics_result" in vars(model):
        return False
    original = model.get_metrics_result
    reduce_cls = _reduce_class(keras)

    def get_metrics_result() -> dict[str, Any]:
        context = tf.distribute.get_replica_context()
        metrics = model.metrics
        reducible = [m for m in metrics if _reducible(m, reduce_cls)]
        if context is None or not reducible:
            return original()
        local = [tf.identity(v) for m in reducible for v in _state(m)]
        summed = iter(context.all_reduce(tf.distribute.ReduceOp.SUM, local))
        synced = {}
        for m in reducible:
            total = next(summed)
            synced[id(m)] = tf.math.divide_no_nan(total, next(summed)) if hasattr(m, "count") else total
        results: dict[str, Any] = {}
        for m in metrics:
            result = synced[id(m)] if id(m) in synced else m.result()
            if isinstance(result, dict):
                results.update(result)
            else:
                results[m.name] = result
        return results

    model.get_metrics_result = get_metrics_result
    return True


def _state(metric: Any) -> list[Any]:
    """(total, count) for a mean, (total,) for a sum: Keras's Reduce creates count only for means."""
    return [metric.total, metric.count] if hasattr(metric, "count") else [metric.total]
