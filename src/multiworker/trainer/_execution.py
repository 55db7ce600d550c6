"""Steps per execution: several training steps in one call of Keras's train function.

Each call of the train function costs Python and runtime work besides the step itself: about
3 ms under MultiWorkerMirroredStrategy with one thread per worker (the distributed iterator's
spec, the collective's instance key, a multi-device function call), about 1 ms in one process
(BENCHMARKS.md, Scaling). Keras's ``steps_per_execution`` runs several steps in one call and pays
that once. "auto" chooses the number from the measured step time: as many steps as fit in
``TARGET_SECONDS``, at most ``MAX_STEPS``, agreed by all workers (every worker must run the same
steps in each call, or their collectives would not pair up), so a slow model keeps one step per
call and its progress, backups and callbacks still see every step. Batch callbacks see the last
step of each call; a caller's callback with batch hooks keeps one step a call, on every worker
(callbacks may differ by role; the agreement carries the veto). Keras refuses several steps a
call on data of unknown size: "auto" stands aside for such training data without
``steps_per_epoch``, and runs the calls that end an epoch one step each before validating on
such data (Keras builds the validation's data handler, and checks it, with the current value).
Imports tf_keras; loaded lazily by ``trainer.fit``.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import tensorflow as tf
import tf_keras as keras

logger = logging.getLogger(__name__)

__all__ = ["MAX_STEPS", "TARGET_SECONDS", "AutoStepsPerExecution", "Execution", "agree", "configure",
           "parse_steps_per_execution", "steps_for"]

#: "auto" runs at most this many steps in one call ...
MAX_STEPS = 10
#: ... and no more than fit in this many seconds of training.
TARGET_SECONDS = 0.5
#: Calls run one step each before choosing: the first WARMUP_CALLS (the first traces the function,
#: the next few are slower while kernels and allocators warm up) are not timed, the rest are.
WARMUP_CALLS = 5
PROBE_CALLS = 15

_BATCH_HOOKS = ("on_batch_begin", "on_batch_end", "on_train_batch_begin", "on_train_batch_end")


def parse_steps_per_execution(value: str | int | None) -> int | None:
    """None for "auto" (or None), else the number of steps (>= 1); ValueError with the accepted forms."""
    if value is None or value == "auto":
        return None
    if not isinstance(value, bool) and isinstance(value, int | str) and str(value).strip().isdigit():
        if int(value) >= 1:
            return int(value)
    raise ValueError(f"steps_per_execution={value!r}: expected 'auto' or a number of steps >= 1")


def steps_for(step_seconds: float, *, target: float = TARGET_SECONDS, most: int = MAX_STEPS) -> int:
    """Steps per call for a measured step time: as many as fit in ``target`` seconds, 1 to ``most``."""
    return max(1, min(most, int(target / max(step_seconds, 1e-6))))


def has_own_batch_hooks(callback: Any) -> bool:
    """Whether ``callback`` has batch hooks written outside tf_keras and multiworker (a user's own,
    which may count calls as steps)."""
    for name in _BATCH_HOOKS:
        hook = vars(callback).get(name) or getattr(type(callback), name, None)
        module = getattr(hook, "__module__", "") or ""
        if hook is not None and not module.startswith(("tf_keras.", "keras.", "multiworker.")):
            return True
    return False


class AutoStepsPerExecution(keras.callbacks.Callback):
    """Starts ``fit`` at one step per call, times the calls after ``warmup_calls`` up to
    ``probe_calls``, then sets the steps per call the workers agree on: the rounded-up mean of
    their proposals, or 1 when any of them must keep one step a call (``keep_one``: a callback of
    its own with batch hooks; under MultiWorkerMirroredStrategy the callbacks may differ by role,
    the steps per call may not)."""

    def __init__(self, *, most: int = MAX_STEPS, target: float = TARGET_SECONDS,
                 warmup_calls: int = WARMUP_CALLS, probe_calls: int = PROBE_CALLS, keep_one: bool = False,
                 one_at_epoch_end: bool = False):
        super().__init__()
        self._supports_tf_logs = True  # it reads no logs: its batch hooks must not force a device sync
        self.most, self.target, self.keep_one = most, target, keep_one
        self.one_at_epoch_end = one_at_epoch_end
        self.warmup_calls = max(1, warmup_calls)
        self.probe_calls = max(self.warmup_calls + 1, probe_calls)
        self.chosen: int | None = None
        self._calls = 0
        self._mark = 0.0

    def on_train_begin(self, logs: Any = None) -> None:
        self.model.steps_per_execution = 1
        self._calls, self.chosen = 0, None

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self.chosen and self.one_at_epoch_end:
            self.model.steps_per_execution = self.chosen

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._calls += 1
        if self._calls == self.warmup_calls:
            self._mark = time.monotonic()
        elif self._calls == self.probe_calls:
            self._choose()
        if self.one_at_epoch_end:
            self._settle_for_validation(batch)

    def _choose(self) -> None:
        step_seconds = (time.monotonic() - self._mark) / (self.probe_calls - self.warmup_calls)
        proposal = steps_for(step_seconds, target=self.target, most=self.most)
        self.chosen = agree(self.model.distribute_strategy, proposal, keep_one=self.keep_one, most=self.most)
        self.model.steps_per_execution = self.chosen
        logger.info("%d steps per execution (%.1f ms a step%s)", self.chosen, 1000 * step_seconds,
                    "; a worker's callback has batch hooks" if self.chosen == 1 and proposal > 1 else "")

    def _settle_for_validation(self, batch: int) -> None:
        """One step a call for the calls that end the epoch: Keras builds its validation data
        handler right after them with the current value, and refuses more than one on validation
        data of unknown size. Costs at most ``chosen - 1`` one-step calls an epoch."""
        steps = self.params.get("steps") if self.params else None
        if self.chosen and self.chosen > 1 and steps and batch + 1 + self.chosen > steps:
            self.model.steps_per_execution = 1


def agree(strategy: Any, proposal: int, *, keep_one: bool = False, most: int = MAX_STEPS) -> int:
    """The same steps per call on every worker: 1 if any worker must keep one step a call, else
    the rounded-up mean of the proposals (one small all-reduce; a single process needs none)."""
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1 if keep_one else max(1, min(most, proposal))
    values = strategy.experimental_distribute_values_from_function(
        lambda _ctx: tf.constant([float(proposal), 1.0, float(keep_one)], tf.float32))
    total, count, keep = strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None).numpy()
    return 1 if keep > 0 else max(1, min(most, math.ceil(float(total) / float(count))))


class Execution:
    """What :func:`configure` did to a model: callbacks to add first, and how to undo it."""

    def __init__(self, model: Any = None, own: int | None = None, callbacks: list[Any] | None = None):
        self.model, self.own, self.callbacks = model, own, list(callbacks or [])

    def restore(self) -> None:
        """After ``fit``: evaluate and predict run as the model was compiled."""
        if self.model is not None and self.own is not None:
            self.model.steps_per_execution = self.own


def size_known(data: Any, steps: int | None) -> bool:
    """Whether Keras can tell how many steps ``data`` gives (it refuses several steps a call
    otherwise): ``steps`` given, a dataset of known cardinality, arrays, or a sized sequence."""
    if steps:
        return True
    if isinstance(data, tf.data.Dataset):
        return int(data.cardinality()) >= 0
    if isinstance(data, tuple | list):
        return bool(data) and all(size_known(d, None) for d in data)
    if isinstance(data, dict):
        return bool(data) and all(size_known(d, None) for d in data.values())
    return hasattr(data, "shape") or hasattr(data, "__len__")


def configure(model: Any, requested: str | int | None, user_callbacks: list[Any], *, data: Any = None,
              steps_per_epoch: int | None = None, fit_kwargs: dict | None = None) -> Execution:
    """Set ``model`` up for ``requested`` steps per execution before ``model.fit(data, ...)``;
    call ``restore()`` on the result after it.

    "auto" leaves alone a model compiled with its own ``steps_per_execution``,
    ParameterServerStrategy (its coordinator schedules steps) and training data of unknown size
    without ``steps_per_epoch``; a user callback with batch hooks keeps one step a call (on every
    worker: the choice is agreed); validation data of unknown size is evaluated one step a call
    (validation data of known size runs as many as training, as Keras does).
    """
    fit_kwargs = fit_kwargs or {}
    steps = parse_steps_per_execution(requested)
    current = getattr(model, "_steps_per_execution", None)
    strategy = getattr(model, "distribute_strategy", None)
    if current is None or isinstance(strategy, tf.distribute.ParameterServerStrategy):
        return Execution()
    own = int(current.numpy())
    added: list[Any] = []
    if steps is None:
        if own != 1 or getattr(model, "autotune_steps_per_execution", False):
            return Execution()
        if not size_known(data, steps_per_epoch):
            logger.info("one step per execution: the training data's size is unknown (pass steps_per_epoch)")
            return Execution()
        mine = [type(c).__name__ for c in user_callbacks if has_own_batch_hooks(c)]
        if mine:
            logger.info("one step per execution: %s %s batch hooks (pass steps_per_execution=N to fit() "
                        "to run N steps a call anyway)", ", ".join(mine), "has" if len(mine) == 1 else "have")
            if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
                return Execution()
        # Under MWMS every worker builds the same multi-step function and joins the agreement.
        validation = fit_kwargs.get("validation_data")
        unsized = validation is not None and not size_known(validation, fit_kwargs.get("validation_steps"))
        added = [AutoStepsPerExecution(keep_one=bool(mine), one_at_epoch_end=unsized)]
    start = steps or MAX_STEPS  # > 1 when fit begins: Keras builds its multi-step train function
    if own == 1 and start > 1:
        model.train_function = None  # a cached one-step function would ignore the new value
    model.steps_per_execution = start
    return Execution(model, own, added)
