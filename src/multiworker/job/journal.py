"""The journal: the one writer of a running job. Every backend's driver records through it: the
driver's claim and heartbeat, attempts, replicas, events (to the store and the observer), metric
lines (through :class:`LogIngest`), the stop signals that end the job, and the final state.

A write that fails (the home's disk is full, the database is locked too long) is reported once and
dropped, so supervision goes on and the replicas keep running; the final state is retried for a while
(space often frees as replicas end). Reads raise as usual.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from multiworker.cluster import ReplicaId, primary_replica
from multiworker.job import final_state
from multiworker.job.ingest import LogIngest
from multiworker.job.observer import NullObserver, Observer
from multiworker.job.record import JobRecord
from multiworker.job.states import JobState, ReplicaState
from multiworker.job.store import Store

__all__ = ["Journal", "STOP_SIGNALS"]

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_WRITE_ERRORS = (sqlite3.OperationalError, sqlite3.DatabaseError, OSError)
_FINAL_TRIES = 10


class Journal:
    """Records one job as its driver runs it. Built by ``Backend.run`` around the backend's drive step."""

    def __init__(self, store: Store, record: JobRecord, observer: Observer | None = None):
        self.store = store
        self.job_id = record.id
        self.record = record
        self.layout = record.layout
        self.obs: Observer = observer or NullObserver()
        self.ingest = LogIngest(self, self.obs, primary=primary_replica(record.spec).name)
        self.failed_writes = 0
        self.finished: JobState | None = None
        #: set once a platform runs the job (an object created, a CustomJob submitted): a driver error
        #: then leaves the record live, for ``reconcile`` to read the platform's state later
        self.platform_owned = False
        self.stop_signal: int | None = None
        #: called (from the signal handler) when a second stop signal arrives: no more grace
        self.on_repeated_stop: Callable[[], None] | None = None

    # -- guarded writes ---------------------------------------------------------------------
    def _write(self, fn: Callable[..., Any], *args: Any, tries: int = 1, **kwargs: Any) -> Any:
        for attempt in range(tries):
            try:
                return fn(*args, **kwargs)
            except _WRITE_ERRORS as exc:
                self._report(fn.__name__, exc)
                if attempt + 1 < tries:
                    time.sleep(min(2.0, 0.2 * (attempt + 1)))
        return None

    def _report(self, name: str, exc: Exception) -> None:
        self.failed_writes += 1
        if self.failed_writes == 1:
            message = (f"cannot write the job's records in {self.store.path} ({exc}); supervising on, "
                       "later records may be missing: free space in MULTIWORKER_HOME")
            log.error(message)
            try:
                self.obs.on_event("StoreWriteFailed", message, replica=None, warning=True)
            except Exception:  # noqa: BLE001 - the console too may be unwritable
                pass
        log.debug("store.%s failed: %s", name, exc)

    # -- the driver ---------------------------------------------------------------------------
    def claim(self) -> None:
        """This process drives the job from now on: its pid (where signals reach it: ``cancel`` stops the
        job by SIGTERM to that pid, so only from the main thread) and a first heartbeat."""
        fields: dict[str, Any] = {"heartbeat_at": time.time()}
        if threading.current_thread() is threading.main_thread():
            fields["supervisor_pid"] = os.getpid()
        self._write(self.store.update_job, self.job_id, **fields)
        final_state.reserve(self.layout.final_state)

    @property
    def observed(self) -> bool:
        """Whether someone watches (a console): else notes go to the log as well."""
        return not isinstance(self.obs, NullObserver)

    def heartbeat(self) -> None:
        self._write(self.store.update_job, self.job_id, heartbeat_at=time.time())

    def set_state(self, state: JobState, **fields: Any) -> None:
        """A live state (Running, Restarting, Pending) and any of ``started_at``, ``restarts``, ``output_dir``."""
        self._write(self.store.update_job, self.job_id, state=state, **fields)

    def set_restarts(self, restarts: int) -> None:
        self._write(self.store.update_job, self.job_id, restarts=restarts)

    def set_output_dir(self, output_dir: str) -> None:
        self._write(self.store.update_job, self.job_id, output_dir=output_dir)

    def set_handle(self, handle: dict[str, Any]) -> None:
        self._write(self.store.set_handle, self.job_id, handle)

    def current(self) -> JobRecord:
        """The job as recorded now (another process may have cancelled it)."""
        self.record = self.store.get_job(self.job_id)
        return self.record

    def sleep(self, seconds: float) -> bool:
        """Sleep, beating about once a second; True as soon as a stop is requested."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if self.stop_signal is not None:
                return True
            self.heartbeat()
            time.sleep(min(0.2, left))
        return self.stop_signal is not None

    # -- attempts and replicas ---------------------------------------------------------------------
    def start_attempt(self, n: int) -> None:
        self.layout.attempt_dir(n).mkdir(parents=True, exist_ok=True)
        self._write(self.store.start_attempt, self.job_id, n)
        self.ingest.new_attempt(n)

    def end_attempt(self, n: int, outcome: str) -> None:
        self._write(self.store.end_attempt, self.job_id, n, outcome)

    def replica(self, rid: ReplicaId, state: ReplicaState, **fields: Any) -> None:
        self._write(self.store.upsert_replica, self.job_id, rid.role, rid.index, state=state, **fields)

    def event(self, reason: str, message: str, *, replica: str | None = None, warning: bool = False) -> None:
        self._write(self.store.add_event, self.job_id, reason, message, replica=replica, warning=warning)
        self.obs.on_event(reason, message, replica=replica, warning=warning)

    # -- replica output ----------------------------------------------------------------------------
    def feed(self, replica: str, data: bytes, *, attempt: int | None = None) -> None:
        """New output of a replica: metric lines to the store, other lines to the observer."""
        if attempt is not None:
            self.ingest.attempt = attempt  # replicas restarted one by one (TFJob): each chunk carries its own
        self.ingest.feed(replica, data)

    def add_metric(self, attempt: int, replica: str, metric: dict) -> None:
        self._write(self.store.add_metric, self.job_id, attempt, replica, metric)

    def set_progress(self, attempt: int, progress: dict[str, dict]) -> None:
        self._write(self.store.set_progress, self.job_id, attempt, progress)

    def samples(self, rows: list[tuple[str, float, int]]) -> None:
        if rows:
            self._write(self.store.add_samples, self.job_id, rows)
            self.obs.on_samples(rows)

    def tick(self) -> None:
        """Periodic bookkeeping: the latest progress lines and the heartbeat."""
        self.ingest.flush_progress()
        self.heartbeat()

    # -- stop signals ----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def stop_signals(self) -> Iterator[None]:
        """While inside, SIGINT / SIGTERM / SIGHUP request a stop (``stop_signal``); a second one calls
        ``on_repeated_stop``. Only the main thread can take signals; elsewhere this does nothing."""
        def handler(signum: int, _frame: Any) -> None:
            if self.stop_signal is not None and self.on_repeated_stop is not None:
                self.on_repeated_stop()
            self.stop_signal = signum

        previous = {}
        for sig in STOP_SIGNALS:
            try:
                previous[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
        try:
            yield
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)

    @property
    def stop_name(self) -> str:
        return signal.Signals(self.stop_signal).name if self.stop_signal else "cancel"

    # -- the end -------------------------------------------------------------------------------------------
    def finish(self, state: JobState, message: str, *, reason: str | None = None, warning: bool | None = None,
               restarts: int | None = None) -> JobState:
        """Record the final state (unless another process recorded one first: ``cancel``, and that one
        stands); live replicas become Stopped; an event and the observer say how it ended."""
        if self.finished is not None:
            return self.finished
        self.ingest.flush_progress()
        try:
            recorded = self.current()
        except _WRITE_ERRORS:
            recorded = None
        now = time.time()
        if recorded is not None and recorded.is_terminal:
            state, message = recorded.state, recorded.message or message
        else:
            fields: dict[str, Any] = {"state": state, "finished_at": now, "message": message, "heartbeat_at": now}
            if restarts is not None:
                fields["restarts"] = restarts
            # first where no full disk can stop it; the store may refuse (it is read back then)
            final_state.write(self.layout.final_state, state.value, message, now)
            self._write(self.store.update_job, self.job_id, tries=_FINAL_TRIES, **fields)
            self.event(reason or state.value, message,
                       warning=state is not JobState.SUCCEEDED if warning is None else warning)
        self._write(self._stop_live_replicas, now)
        self.finished = state
        self.obs.on_finish(state.value, message)
        return state

    def _stop_live_replicas(self, now: float) -> None:
        for rep in self.store.replicas(self.job_id):
            if ReplicaState.of(rep["state"]).is_live:
                self.store.upsert_replica(self.job_id, rep["role"], rep["idx"], state=ReplicaState.STOPPED,
                                          finished_at=now)
