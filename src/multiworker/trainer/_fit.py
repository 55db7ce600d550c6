"""``fit``: model.fit for whatever role this replica has, so pools are configuration, not code."""

from __future__ import annotations

import logging
import sys
from typing import Any

from multiworker.trainer._callbacks import callbacks as default_callbacks
from multiworker.trainer._context import Context, context
from multiworker.trainer._markers import mark_training_done
from multiworker.trainer._metric_sync import sync_step_metrics
from multiworker.trainer._peer_loss import peer_lost_in_flight, save_after_peer_loss
from multiworker.trainer._stop_guard import sigterm_waits_for_call
from multiworker.trainer._strategy import fit_kwargs, serve_if_needed

logger = logging.getLogger(__name__)

__all__ = ["fit"]


def _is_parameter_server_strategy(model: Any) -> bool:
    import tensorflow as tf

    return isinstance(getattr(model, "distribute_strategy", None), tf.distribute.ParameterServerStrategy)


def _enable_exact_evaluation(model: Any) -> None:
    """Make a later ``model.evaluate(finite_dataset)`` work under ParameterServerStrategy.

    Without ``compile(pss_evaluation_shards=...)`` it runs until a worker's copy of the data ends
    and fails; with it, each shard of the data is evaluated exactly once.
    """
    if getattr(model, "_pss_evaluation_shards", None) == 0 and hasattr(model, "_infer_exact_eval_shards"):
        model._pss_evaluation_shards = model._infer_exact_eval_shards("auto")
        logger.info("ParameterServerStrategy: exact evaluation over %d shards", model._pss_evaluation_shards)


def fit(
    model: Any,
    data: Any,
    *,
    epochs: int,
    global_batch_size: int | None = None,
    steps_per_epoch: int | None = None,
    eval_data: Any = None,
    eval_steps: int | None = None,
    callbacks: list[Any] | None = None,
    backup_every: str | int | float | None = "auto",
    steps_per_execution: str | int | None = "auto",
    ctx: Context | None = None,
    verbose: int | str | None = None,
    **kwargs: Any,
) -> Any:
    """Train ``model`` on ``data`` with the library's callbacks, then mark training done.

    - chief and workers: ``model.fit`` (see :func:`fit_kwargs` for ``data``) with
      :func:`callbacks` plus ``callbacks``; returns the History;
    - evaluator: evaluates every checkpoint on ``eval_data`` until training is done, then
      exits the process with status 0 (the code after ``fit`` is the training replicas');
    - ps, and workers under ParameterServerStrategy: serve and exit (normally already done by
      :func:`strategy`).

    Under ParameterServerStrategy it also turns on exact evaluation (as
    ``compile(pss_evaluation_shards="auto")`` would), so ``model.evaluate(test_ds)`` works after
    it as under the other strategies. Under MultiWorkerMirroredStrategy a ``tf.data.Dataset`` is
    trained with tf.data autotuning off (see :mod:`multiworker.trainer._tf_workarounds`: its
    thread stalled a worker 20-60 s at each epoch end; ``num_parallel_calls=AUTOTUNE`` then uses
    the replica's cores), and a step's metrics are synchronised in one all-reduce instead of one
    per variable and logged value (:mod:`multiworker.trainer._metric_sync`). ``backup_every``
    says how often training state is backed up for a restart to resume from: "auto" (about every
    2 s of training), "epoch", a number of steps, or seconds ("10s"); with any but "epoch", the
    chief also backs up the step it reached when ``model.fit`` fails because a peer was lost
    (:mod:`multiworker.trainer._peer_loss`), then re-raises. ``steps_per_execution``
    says how many steps run in one call of the train function: "auto" (as many as fit in 0.5 s,
    at most 10, chosen after 15 steps and agreed by the workers; one when the model was compiled
    with its own, a callback in ``callbacks`` has batch hooks, or the data's size is unknown
    without ``steps_per_epoch``) or a number; see :mod:`multiworker.trainer._execution`. Extra
    keyword arguments go to ``model.fit``.
    """
    ctx = ctx or context()
    if ctx.is_evaluator:
        from multiworker.trainer._evaluator import run_evaluator

        if eval_data is None:
            raise ValueError("this replica is an evaluator: pass eval_data=<dataset> to fit()")
        run_evaluator(model, eval_data, steps=eval_steps, ctx=ctx)
        logger.info("evaluator done")
        sys.exit(0)
    serve_if_needed(ctx)
    if _is_parameter_server_strategy(model):
        _enable_exact_evaluation(model)
    if verbose is None:
        verbose = 2 if ctx.is_chief else 0
    data = _untuned_under_mwms(model, data)
    sync_step_metrics(model)
    from multiworker.trainer import _execution

    execution = _execution.configure(model, steps_per_execution, list(callbacks or []), data=data,
                                     steps_per_epoch=steps_per_epoch, fit_kwargs=kwargs)
    all_callbacks = (execution.callbacks + default_callbacks(global_batch_size, ctx=ctx, backup_every=backup_every)
                     + list(callbacks or []))
    try:
        with sigterm_waits_for_call(_saves_after_peer_loss(model, all_callbacks), holds=peer_lost_in_flight):
            try:
                history = model.fit(**fit_kwargs(data, steps_per_epoch=steps_per_epoch), epochs=epochs,
                                    callbacks=all_callbacks, verbose=verbose, **kwargs)
            except Exception as exc:
                save_after_peer_loss(all_callbacks, exc)  # the chief keeps the step reached for the restart
                raise
    finally:
        execution.restore()  # evaluate and predict after fit run as the model was compiled
    mark_training_done(ctx)
    return history


def _saves_after_peer_loss(model: Any, callbacks: list[Any]) -> bool:
    """Whether this replica backs up the step it reached when a peer is lost: the chief under
    MultiWorkerMirroredStrategy with a step-level backup. Its SIGTERM then waits for the call in
    flight (:mod:`multiworker.trainer._stop_guard`), so the stop that follows a peer's death does
    not cut that backup short."""
    import tensorflow as tf

    strategy = getattr(model, "distribute_strategy", None)
    return (isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) and strategy.extended.should_checkpoint
            and any(hasattr(c, "save_after_peer_loss") for c in callbacks))


def _untuned_under_mwms(model: Any, data: Any) -> Any:
    import tensorflow as tf

    if not isinstance(getattr(model, "distribute_strategy", None), tf.distribute.MultiWorkerMirroredStrategy):
        return data
    if not isinstance(data, tf.data.Dataset):
        return data
    options = tf.data.Options()
    options.autotune.enabled = False
    return data.with_options(options)

