"""A last backup when a peer is lost: the chief saves the step it reached before it exits.

Under MultiWorkerMirroredStrategy every worker holds the same weights after each step, so when a
peer dies (SIGKILL, a lost host) the survivors' collectives fail with UnavailableError and the
chief still holds the state of the last step every worker applied: ``optimizer.iterations`` counts
exactly the steps applied, within a call of several steps too. Saving it then, into the
backup the restart reads, makes a kill cost the restart alone, not the training since the last
periodic backup.

The save must not run a collective (the peers are gone or inside another one): the metric
variables (SyncOnReadVariable, summed across workers on a normal save) are written from this
worker's own part, scaled as if every worker had seen the same (they only feed the epoch's running
metrics, which restart at the next epoch). Only the chief saves, as it does every backup; a
SIGTERM from the launcher meanwhile waits until the save is written (a watchdog ends the process
if the save takes longer than ``SAVE_LIMIT``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["PEER_LOST_ERRORS", "deferred_sigterm", "local_metric_reads", "peer_lost", "peer_lost_in_flight",
           "save_after_peer_loss"]

#: Errors a collective raises when a peer went away (not a bug in this worker's own computation).
PEER_LOST_ERRORS = ("UnavailableError", "AbortedError", "CancelledError", "DeadlineExceededError")
#: Seconds a last backup may take before a deferred SIGTERM ends the process anyway.
SAVE_LIMIT = 5.0


def peer_lost(exc: BaseException) -> bool:
    """Whether ``exc`` says a peer went away (a TensorFlow error of the kinds in PEER_LOST_ERRORS)."""
    import tensorflow as tf

    return any(isinstance(exc, getattr(tf.errors, name)) for name in PEER_LOST_ERRORS)


def peer_lost_in_flight(exc: BaseException | None) -> bool:
    """Whether ``exc``, or an exception it was raised from or during, says a peer went away. Also
    reads the raw status TensorFlow's eager call raises first (``_NotOkStatusException``, with its
    code), before turning it into a ``tf.errors`` class: a signal handler may run in between."""
    import tensorflow as tf

    codes = {getattr(tf.errors, name) for name in ("UNAVAILABLE", "ABORTED", "CANCELLED", "DEADLINE_EXCEEDED")}
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if peer_lost(exc) or (type(exc).__name__ == "_NotOkStatusException" and getattr(exc, "code", None) in codes):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


@contextlib.contextmanager
def local_metric_reads() -> Iterator[bool]:
    """While inside, a SyncOnReadVariable read across replicas returns this worker's own part
    (times the replicas in sync for a SUM, so a restore, which divides by them, gets it back)
    instead of running an all-reduce. Yields False, changing nothing, if TensorFlow lacks the hook."""
    try:
        from tensorflow.python.distribute import values
        from tensorflow.python.ops import variable_scope
    except ImportError:  # pragma: no cover - a TensorFlow without the module
        yield False
        return
    original = getattr(values.SyncOnReadVariable, "_get_cross_replica", None)
    if original is None:  # pragma: no cover
        yield False
        return

    def local(self: Any) -> Any:
        value = self._get_on_device_or_primary().read_value()
        if self._aggregation == variable_scope.VariableAggregation.SUM:
            return value * self._distribute_strategy.num_replicas_in_sync
        return value

    values.SyncOnReadVariable._get_cross_replica = local
    try:
        yield True
    finally:
        values.SyncOnReadVariable._get_cross_replica = original


@contextlib.contextmanager
def deferred_sigterm(limit: float = SAVE_LIMIT) -> Iterator[None]:
    """Hold a SIGTERM that arrives inside until the block ends, then let it act (default action:
    the process ends). If the block runs past ``limit`` seconds with a SIGTERM held, the process is
    killed. Outside the main thread nothing is deferred."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: held.append(signum))

    def overdue() -> None:
        if held:
            os.kill(os.getpid(), signal.SIGKILL)

    watchdog = threading.Timer(limit, overdue)
    watchdog.daemon = True
    watchdog.start()
    try:
        yield
    finally:
        watchdog.cancel()
        signal.signal(signal.SIGTERM, previous)
        if held:
            os.kill(os.getpid(), signal.SIGTERM)


def save_after_peer_loss(callbacks: list[Any], exc: BaseException) -> bool:
    """After ``model.fit`` raised ``exc``: if a peer was lost (or a SIGTERM stopped it, see
    :class:`~multiworker.trainer._stop_guard.PreemptionNotice`), let the step-level backup callback in
    ``callbacks`` (if any) save the step this worker reached. True if a backup was written."""
    notice = type(exc).__name__ == "PreemptionNotice"  # see _stop_guard
    if not notice and not peer_lost(exc):
        return False
    for callback in callbacks:
        save = getattr(callback, "save_after_peer_loss", None)
        if save is not None:
            try:
                return bool(save("a SIGTERM came (a preemption notice?)") if notice else save())
            except Exception:  # noqa: BLE001 - the original error is what the user must see
                logger.warning("could not save a last backup after losing a peer", exc_info=True)
                return False
    return False
