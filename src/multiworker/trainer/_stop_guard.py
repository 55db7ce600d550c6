"""A SIGTERM on the chief waits for the train call in flight, so a peer's death is backed up first.

When a worker dies, two things race: the chief's collective fails (30-40 ms after the death, on
loopback) and the chief then saves the step it reached (:mod:`multiworker.trainer._peer_loss`),
while the launcher (or Kubernetes, or Ray) sees the death and stops the rest of the group with
SIGTERM. Measured before this guard: in about one restart of six the SIGTERM landed between the
failed collective and the save (5 ms after it, once), and the restart lost every step since the
last periodic backup.

Inside :func:`sigterm_waits_for_call` a SIGTERM acts as soon as the main thread runs Python again,
which is when the train call in flight returns or fails (at most a call: about 0.5 s with
``steps_per_execution="auto"``); a failing call runs Python first to build its error, and the
handler sees the error there:
- if the exception being handled then says a peer was lost (``holds``), the SIGTERM is held until
  the block ends, so the save after the peer loss, inside the block, is written first; then the
  process ends by SIGTERM;
- with no exception in flight (a preemption notice, a cancel), the handler raises
  :class:`PreemptionNotice` there: ``fit`` stops at that point and the chief backs up the step it
  reached, as after a peer loss (no collective), before the process ends by SIGTERM; a preempted
  chief so loses no step;
- otherwise (another exception) the process ends by SIGTERM at once, as without the guard.
A watcher thread (woken by Python's signal wakeup fd, so it runs even while the main thread is in
TensorFlow) kills the process if the main thread does not act within ``call_limit`` seconds (a
call that hangs), or does not end the block within ``save_limit`` seconds of holding it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

from multiworker.trainer._peer_loss import SAVE_LIMIT

logger = logging.getLogger(__name__)

__all__ = ["CALL_LIMIT", "SAVE_LIMIT", "PreemptionNotice", "sigterm_waits_for_call"]

#: Seconds a SIGTERM may wait for the main thread to return from the call in flight. A held SIGTERM
#: then waits at most SAVE_LIMIT (the save after a peer loss, as for any other backup) for the block's end.
CALL_LIMIT = 1.0


class PreemptionNotice(Exception):
    """Raised where a SIGTERM found the chief training: stop here and back up the step reached."""


def _die() -> None:
    """End the process by SIGTERM's default action (the exit status a stop expects)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _exception_in_flight(frame: Any) -> BaseException | None:
    """The exception being handled where the signal interrupted, or the one being created there:
    TensorFlow builds its error by calling the error class from C++, and a pending signal's handler
    runs at the first Python line it reaches, inside that ``__init__``, before anything is raised."""
    handled = sys.exc_info()[1]
    if handled is not None:
        return handled
    while frame is not None:
        if frame.f_code.co_name == "__init__" and isinstance(frame.f_locals.get("self"), BaseException):
            return frame.f_locals["self"]
        frame = frame.f_back
    return None


class _Guard:
    def __init__(self, holds: Callable[[BaseException], bool], call_limit: float, save_limit: float) -> None:
        self.holds, self.call_limit, self.save_limit = holds, call_limit, save_limit
        self.held = False
        self.acted = threading.Event()  # the main thread's handler ran (held, or is ending the process)
        self.done = threading.Event()  # the block ended
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)  # as signal.set_wakeup_fd requires; the watcher blocks on the other end

    def handler(self, signum: int, frame: Any) -> None:
        self.acted.set()
        failing = _exception_in_flight(frame)
        if failing is not None and self.holds(failing):
            self.held = True  # a call failed: the save after a peer loss comes first
            return
        if failing is None:
            self.held = True  # the notice: back up the step reached, then end
            raise PreemptionNotice("SIGTERM while training: backing up the step reached before ending")
        _die()

    def watch(self) -> None:
        """Off the main thread: after a SIGTERM, make sure it takes effect within the limits."""
        while signal.SIGTERM not in os.read(self.wake_r, 512):  # other signals' bytes, or the block's end
            if self.done.is_set():
                return
        if not self.acted.wait(self.call_limit) or not self.done.wait(self.save_limit):
            if not self.done.is_set():
                os.kill(os.getpid(), signal.SIGKILL)


@contextlib.contextmanager
def sigterm_waits_for_call(active: bool, *, holds: Callable[[BaseException], bool], call_limit: float = CALL_LIMIT,
                           save_limit: float = SAVE_LIMIT) -> Iterator[None]:
    """Inside, a SIGTERM waits for the call in flight, and for the block's end if the call failed
    with an exception that ``holds`` it (module docstring). Changes nothing when not ``active``, off
    the main thread, or when SIGTERM already has a handler other than the default (the user's, or
    a PreemptionCheckpointHandler's)."""
    if (not active or threading.current_thread() is not threading.main_thread()
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL):
        yield
        return
    guard = _Guard(holds, call_limit, save_limit)
    previous_fd = signal.set_wakeup_fd(guard.wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGTERM, guard.handler)
    watcher = threading.Thread(target=guard.watch, name="sigterm-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        guard.done.set()
        os.write(guard.wake_w, b"\0")  # wakes a watcher still waiting for a SIGTERM, to leave
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.set_wakeup_fd(previous_fd)
        watcher.join()
        for fd in (guard.wake_r, guard.wake_w):
            os.close(fd)
        if guard.held:
            logger.info("a SIGTERM waited for the last backup (after a peer loss, or on its notice)")
            _die()
