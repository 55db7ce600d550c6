"""A training step under MultiWorkerMirroredStrategy: one all-reduce for its gradients and metrics.

Keras reads each metric's result across workers every step: a metric's ``total`` and ``count``
are SyncOnRead variables, and reading each one in cross-replica context is its own collective
(about 2 ms each with one thread per worker, four for loss and accuracy; BENCHMARKS.md). For
metrics whose result is ``total / count`` or ``total`` (tf-keras's ``Reduce``: Mean, Sum, the
loss tracker, accuracy and every ``MeanMetricWrapper``), the same numbers come from summing the
local variables of all of them in one all-reduce. Other metrics keep their own ``result()``.

In a training step that sum rides in the gradients' all-reduce: the step updates the metrics
before it applies the gradients (both come from the same forward pass, so the values are the
same), all-reduces gradients and metric states as one pack, and hands the optimizer the summed
gradients with its own aggregation skipped. A step is then one collective, as in the tutorials'
custom training loops. Sparse gradients, loss scaling and optimizers other than tf-keras's
``Optimizer`` take Keras's own path (the metrics still in one all-reduce of their own).

Keras then all-reduces each logged value once more ("auto" means "sum" there), over values that
are already global; "first" gives bit-identical logs without those collectives (the same loss and
accuracy on both workers to the last bit; 2-3 ms less per step with 1 thread per worker).
"""

from __future__ import annotations

from typing import Any

__all__ = ["sync_step_metrics"]


def _reduce_class(keras: Any) -> type:
    """tf-keras's ``Reduce`` (the base of Mean and Sum; not exported by name)."""
    return next((c for c in keras.metrics.Mean.__mro__ if c.__name__ == "Reduce"), keras.metrics.Mean)


def _state(metric: Any) -> list[Any]:
    """(total, count) for a mean, (total,) for a sum: Keras's Reduce creates count only for means."""
    return [metric.total, metric.count] if hasattr(metric, "count") else [metric.total]


class _StepMetrics:
    """The model's Reduce metrics: their local state to sum, and the results from those sums."""

    def __init__(self, model: Any, keras: Any) -> None:
        reduce_cls = _reduce_class(keras)
        self.metrics = list(model.metrics)
        self.reducible = [m for m in self.metrics if isinstance(m, reduce_cls) and type(m).result is reduce_cls.result]
        self.states = [_state(m) for m in self.reducible]

    def local(self, tf: Any) -> list[Any]:
        """This worker's totals and counts, flat (read in replica context: no collective)."""
        return [tf.identity(v) for state in self.states for v in state]

    def results(self, tf: Any, summed: list[Any]) -> dict[str, Any]:
        """Each metric's result from ``summed`` (``local`` summed over workers), Keras's for the rest."""
        values = iter(summed)
        synced = {}
        for m, state in zip(self.reducible, self.states):
            total = next(values)
            synced[id(m)] = tf.math.divide_no_nan(total, next(values)) if len(state) == 2 else total
        results: dict[str, Any] = {}
        for m in self.metrics:
            result = synced[id(m)] if id(m) in synced else m.result()
            if isinstance(result, dict):
                results.update(result)
            else:
                results[m.name] = result
        return results


def _sum(tf: Any, context: Any, tensors: list[Any]) -> list[Any]:
    """``tensors`` summed over workers: one collective per dtype (a pack is concatenated)."""
    by_dtype: dict[Any, list[int]] = {}
    for i, t in enumerate(tensors):
        by_dtype.setdefault(t.dtype, []).append(i)
    summed: list[Any] = [None] * len(tensors)
    for indices in by_dtype.values():
        for i, s in zip(indices, context.all_reduce(tf.distribute.ReduceOp.SUM, [tensors[i] for i in indices])):
            summed[i] = s
    return summed


def _own(model: Any, keras: Any, name: str) -> bool:
    """Whether the model (its class or the instance) has its own ``name`` instead of Keras's."""
    return getattr(type(model), name) is not getattr(keras.Model, name) or name in vars(model)


def sync_step_metrics(model: Any) -> bool:
    """Under MultiWorkerMirroredStrategy, sync a step's gradients and metrics in one all-reduce.

    Sets ``distribute_reduction_method = "first"`` unless the user chose one; gives the model a
    ``get_metrics_result`` that syncs its Reduce metrics in one all-reduce, and a ``train_step``
    that syncs them together with the gradients, each unless the model has its own (a model with
    its own ``compute_metrics`` keeps Keras's ``train_step``). Returns whether
    ``get_metrics_result`` was installed. Logs and weights are the ones Keras's path gives.
    """
    import tensorflow as tf
    import tf_keras as keras

    if not isinstance(getattr(model, "distribute_strategy", None), tf.distribute.MultiWorkerMirroredStrategy):
        return False
    if getattr(model, "_distribute_reduction_method", "set") is None:
        model.distribute_reduction_method = "first"
    if _own(model, keras, "get_metrics_result"):
        return False
    original = model.get_metrics_result

    def get_metrics_result() -> dict[str, Any]:
        context = tf.distribute.get_replica_context()
        step = _StepMetrics(model, keras)
        if context is None or not step.reducible:
            return original()
        return step.results(tf, _sum(tf, context, step.local(tf)))

    model.get_metrics_result = get_metrics_result
    if not (_own(model, keras, "train_step") or _own(model, keras, "compute_metrics")):
        model.train_step = _fused_train_step(model, tf, keras, original_step=model.train_step)
    return True


def _fused_train_step(model: Any, tf: Any, keras: Any, original_step: Any) -> Any:
    """Keras's ``train_step`` with the gradients and the metrics summed in one all-reduce."""

    def train_step(data: Any) -> dict[str, Any]:
        optimizer = model.optimizer
        context = tf.distribute.get_replica_context()
        if (context is None or not isinstance(optimizer, keras.optimizers.Optimizer)
                or isinstance(optimizer, keras.mixed_precision.LossScaleOptimizer)):
            return original_step(data)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x, y, y_pred, sample_weight)
        model._validate_target_and_loss(y, loss)
        grads_and_vars = optimizer.compute_gradients(loss, model.trainable_variables, tape)
        model.compiled_metrics.update_state(y, y_pred, sample_weight)
        grads = [g for g, _ in grads_and_vars if g is not None]
        if not all(isinstance(g, tf.Tensor) for g in grads):  # IndexedSlices: Keras's own aggregation
            optimizer.apply_gradients(grads_and_vars)
            return model.get_metrics_result()
        step = _StepMetrics(model, keras)
        summed = iter(_sum(tf, context, grads + step.local(tf)))
        optimizer.apply_gradients([(None if g is None else next(summed), v) for g, v in grads_and_vars],
                                  skip_gradients_aggregation=True)
        return step.results(tf, list(summed))

    return train_step
