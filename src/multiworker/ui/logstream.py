"""One replica's log for the browser: the tail, then each new line as it is written, on to every
new attempt after a group restart (``logs --follow`` as server-sent events). Each batch carries the
id ``attempt:offset``, so a reconnecting EventSource resumes where it stopped, without repeats."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from multiworker.errors import UserError
from multiworker.job import Store
from multiworker.monitor.logs import (
    SUPERVISOR,
    Tailer,
    latest_attempt,
    log_files,
    tail_offset,
)
from multiworker.status import refresh_liveness

__all__ = ["LogStream", "parse_resume", "sse_message", "MAX_LINE"]

log = logging.getLogger(__name__)

MAX_LINE = 10_000  # characters of one line sent to the page; longer lines are cut


def parse_resume(value: str | None) -> tuple[int, int] | None:
    """``"2:4096"`` (a Last-Event-ID) -> (attempt 2, byte offset 4096); anything else -> None."""
    try:
        attempt, offset = (int(part) for part in (value or "").split(":"))
    except ValueError:
        return None
    return (attempt, offset) if attempt >= 0 and offset >= 0 else None


def sse_message(event: str, data: dict, event_id: str | None = None) -> str:
    """One server-sent event (data is one JSON line, so it never needs splitting)."""
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


class LogStream:
    """Polled by the server; each :meth:`poll` returns the events to send and whether the stream ended.

    ``attempt=None`` follows the latest attempt across restarts; a number pins that attempt (the
    stream ends when it has). Validate ``replica`` and ``attempt`` with :meth:`check` first.
    """

    def __init__(self, job_id: str, replica: str, *, attempt: int | None = None, tail: int | None = 1000,
                 resume: tuple[int, int] | None = None):
        self.job_id = job_id
        self.replica = replica
        self.follow = attempt is None and replica != SUPERVISOR
        self.pinned = attempt is not None and replica != SUPERVISOR
        self.attempt = attempt
        self.tail = tail
        self.resume = resume
        self._tailer: Tailer | None = None
        self._current = 0

    def check(self, store: Store) -> None:
        """Raise UserError for a replica or attempt the job does not have."""
        log_files(store, self.job_id, attempt=self.attempt, replica=self.replica)

    def _open(self, store: Store, attempt: int | None, offset: int | None) -> None:
        self._current, files = log_files(store, self.job_id, attempt=attempt, replica=self.replica)
        path: Path = files[0][1]
        if offset is None:
            offset = tail_offset(path, self.tail) if self.tail is not None else 0
        self._tailer = Tailer(path, offset)

    def _start(self, store: Store) -> None:
        resume = self.resume
        if resume is not None and (self.attempt is None or resume[0] == self.attempt):
            try:
                self._open(store, resume[0] if self.replica != SUPERVISOR else None, resume[1])
                return
            except UserError:
                log.debug("cannot resume %s at %s; starting over", self.job_id, resume)
        self._open(store, self.attempt, None)

    def _batch(self, lines: list[str]) -> dict:
        tailer = self._tailer
        offset = tailer.offset - len(tailer.partial)
        text = [line if len(line) <= MAX_LINE else line[:MAX_LINE] + " [...]" for line in lines]
        return {"event": "lines", "id": f"{self._current}:{offset}",
                "data": {"attempt": self._current, "replica": self.replica, "lines": text}}

    def poll(self, store: Store) -> tuple[list[dict], bool]:
        """New events (dicts with event, data and maybe id) and True once nothing more will come."""
        if not store.has_job(self.job_id):
            return [{"event": "gone", "data": {"job": self.job_id}}], True
        if self._tailer is None:
            self._start(store)
            events = [{"event": "attempt", "data": {"attempt": self._current, "replica": self.replica}}]
        else:
            events = []
        # The state first: once it is terminal, every replica has stopped writing.
        job = refresh_liveness(store, self.job_id)
        done = job.is_terminal or (self.pinned and self._attempt_finished(store))
        lines = self._tailer.read()
        newer = latest_attempt(store, self.job_id) if self.follow else self._current
        if newer > self._current or done:
            lines += self._tailer.flush()
        if lines:
            events.append(self._batch(lines))
        if newer > self._current:
            self._open(store, newer, 0)
            events.append({"event": "attempt", "data": {"attempt": newer, "replica": self.replica, "restart": True}})
            return events, False
        if done:
            events.append({"event": "end", "data": {"state": job.state, "attempt": self._current}})
        return events, done

    def _attempt_finished(self, store: Store) -> bool:
        return any(a["n"] == self._current and a["finished_at"] is not None for a in store.attempts(self.job_id))
