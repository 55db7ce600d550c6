"""Steps per execution: several training steps in one call of Keras's train function.

Each call of the train function costs Python and runtime work besides the step itself: about
3 ms under MultiWorkerMirroredStrategy with one thread per worker (the distributed iterator's
spec, the collective's instance key, a multi-device function call), about 1 ms in one process
(BENCHMARKS.md, Scaling). Keras's ``steps_per_execution`` runs several steps in one call and pays
that once. "auto" chooses the number from the measured step time: as many steps as fit in
``TARGET_SECONDS``, at most ``MAX_STEPS``, agreed by all workers (every worker must run the same
steps in each call), so a slow model keeps one step per call and its progress, backups and
callbacks still see every step. Batch callbacks see the last step of each call; when the caller
passes a callback with batch hooks of its own, "auto" keeps one step per call so its counts stay
true. Imports tf_keras; loaded lazily by ``trainer.fit``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import tensorflow as tf
import tf_keras as keras

from multiworker.trainer._backup import _agree

logger = logging.getLogger(__name__)

__all__ = ["AutoStepsPerExecution", "MAX_STEPS", "TARGET_SECONDS", "configure", "parse_steps_per_execution"]

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
    ``probe_calls``, then sets the steps per call the workers agree on (the rounded-up mean of
    their proposals)."""

    def __init__(self, *, most: int = MAX_STEPS, target: float = TARGET_SECONDS,
                 warmup_calls: int = WARMUP_CALLS, probe_calls: int = PROBE_CALLS):
        super().__init__()
        self.most, self.target = most, target
        self.warmup_calls = max(1, warmup_calls)
        self.probe_calls = max(self.warmup_calls + 1, probe_calls)
        self.chosen: int | None = None
        self._calls = 0
        self._mark = 0.0

    def on_train_begin(self, logs: Any = None) -> None:
        self.model.steps_per_execution = 1
        self._calls, self.chosen = 0, None

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._calls += 1
        if self._calls == self.warmup_calls:
            self._mark = time.monotonic()
        if self._calls != self.probe_calls:
            return
        step_seconds = (time.monotonic() - self._mark) / (self.probe_calls - self.warmup_calls)
        proposal = steps_for(step_seconds, target=self.target, most=self.most)
        self.chosen = min(self.most, _agree(self.model.distribute_strategy, proposal))
        self.model.steps_per_execution = self.chosen
        logger.info("%d steps per execution (%.1f ms a step)", self.chosen, 1000 * step_seconds)


def configure(model: Any, requested: str | int | None, user_callbacks: list[Any]) -> tuple[list[Any], int | None]:
    """Set ``model`` up for ``requested`` steps per execution before ``model.fit``.

    Returns (callbacks to add first, the model's own value to restore after ``fit``; None when
    nothing changed). "auto" leaves alone a model compiled with its own ``steps_per_execution``,
    a user callback with batch hooks, and ParameterServerStrategy (its coordinator schedules steps).
    """
    steps = parse_steps_per_execution(requested)
    current = getattr(model, "_steps_per_execution", None)
    if current is None or isinstance(getattr(model, "distribute_strategy", None), tf.distribute.ParameterServerStrategy):
        return [], None
    own = int(current.numpy())
    if steps is None:
        if own != 1 or getattr(model, "autotune_steps_per_execution", False):
            return [], None
        mine = [type(c).__name__ for c in user_callbacks if has_own_batch_hooks(c)]
        if mine:
            logger.info("one step per execution: %s %s batch hooks (pass steps_per_execution=N to fit() "
                        "to run N steps a call anyway)", ", ".join(mine), "has" if len(mine) == 1 else "have")
            return [], None
    start = steps or MAX_STEPS  # > 1 when fit begins: Keras builds its multi-step train function
    if own == 1 and start > 1:
        model.train_function = None  # a cached one-step function would ignore the new value
    model.steps_per_execution = start
    return ([] if steps else [AutoStepsPerExecution()]), own
