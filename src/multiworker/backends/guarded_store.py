"""The store as a job's driver writes it: a write that fails (the home's disk is full, the database is
locked too long) is reported once and dropped, so supervision goes on and the replicas keep running.

The final state is retried for a while (space often frees as replicas end), then given up with a log
line: the job's replicas are stopped either way, and the next reader records what it can.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from typing import Any

from multiworker.backends.observer import Observer
from multiworker.store import Store

__all__ = ["GuardedStore"]

log = logging.getLogger(__name__)

_WRITE_ERRORS = (sqlite3.OperationalError, sqlite3.DatabaseError, OSError)
# Reads the driver needs to go on; they raise as usual.
_READS = frozenset({"get_job", "has_job", "replicas", "attempts", "events", "metrics", "samples",
                    "latest_samples", "progress", "list_jobs", "recent_events", "resolve", "home", "path"})


class GuardedStore:
    """Wraps a :class:`Store`: every write method swallows write errors after one report."""

    def __init__(self, store: Store, observer: Observer):
        self._store = store
        self._obs = observer
        self.failed_writes = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name in _READS or name.startswith("_") or not callable(attr):
            return attr

        def guarded(*args: Any, **kwargs: Any) -> Any:
            final = name == "update_job" and "finished_at" in kwargs
            for attempt in range(10 if final else 1):
                try:
                    return attr(*args, **kwargs)
                except _WRITE_ERRORS as exc:
                    self._report(name, exc)
                    if final:
                        time.sleep(min(2.0, 0.2 * (attempt + 1)))
            return None

        return guarded

    def _report(self, name: str, exc: Exception) -> None:
        self.failed_writes += 1
        if self.failed_writes == 1:
            message = (f"cannot write the job's records in {self._store.path} ({exc}); supervising on, "
                       "later records may be missing: free space in MULTIWORKER_HOME")
            log.error(message)
            try:
                self._obs.on_event("StoreWriteFailed", message, replica=None, warning=True)
            except Exception:  # noqa: BLE001 - the console too may be unwritable
                pass
        log.debug("store.%s failed: %s", name, exc)
