"""Replica logs, kept per attempt under the job directory: read, tail, and follow them across
group restarts until the job ends (``kubectl logs --follow``, without losing them to pod cleanup)."""

from __future__ import annotations

import dataclasses
import logging
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from multiworker.errors import UserError
from multiworker.job import Store

__all__ = ["LogLine", "SUPERVISOR", "latest_attempt", "log_files", "read_logs", "follow_logs", "Tailer", "tail_offset"]

log = logging.getLogger(__name__)

SUPERVISOR = "supervisor"  # pseudo-replica: the detached supervisor's own log
_CHUNK = 1 << 20


@dataclasses.dataclass(frozen=True)
class LogLine:
    """One line of a replica's log; ``replica`` is None for a marker such as a new attempt."""

    replica: str | None
    attempt: int
    text: str


def latest_attempt(store: Store, job_id: str) -> int:
    """The newest attempt of a job (0 before the first one starts)."""
    attempts = store.attempts(job_id)
    return attempts[-1]["n"] if attempts else 0


def _replica_names(store: Store, job_id: str) -> list[str]:
    names = [f"{r['role']}-{r['idx']}" for r in store.replicas(job_id)]
    if names:
        return names
    from multiworker.cluster import replica_ids

    return [r.name for r in replica_ids(store.get_job(job_id).spec)]


def log_files(store: Store, job_id: str, *, attempt: int | None = None,
              replica: str | None = None) -> tuple[int, list[tuple[str, Path]]]:
    """The attempt shown and its (replica, log path) pairs; the latest attempt and every replica by default."""
    layout = store.get_job(job_id).layout
    if replica == SUPERVISOR:
        return latest_attempt(store, job_id), [(SUPERVISOR, layout.supervisor_log)]
    names = _replica_names(store, job_id)
    if replica is not None:
        if replica not in names:
            raise UserError(f"job {job_id} has no replica {replica!r}; it has {', '.join(names + [SUPERVISOR])}")
        names = [replica]
    latest = latest_attempt(store, job_id)
    if attempt is None:
        attempt = latest
    elif not 0 <= attempt <= latest:
        raise UserError(f"job {job_id} has no attempt {attempt}; its attempts are 0..{latest}")
    return attempt, [(name, layout.replica_log(attempt, name)) for name in names]


def _clean(raw: bytes) -> str | None:
    """Decode a line; of carriage-return redraws (progress bars) keep what a terminal would show last."""
    text = raw.decode("utf-8", "replace").rstrip("\r")
    if "\r" in text:
        text = next((part for part in reversed(text.split("\r")) if part.strip()), "")
    return text


def _tail_offset(path: Path, n: int) -> int:
    """Byte offset where the last ``n`` lines of ``path`` begin."""
    try:
        size = path.stat().st_size
    except OSError:
        return 0
    if n <= 0:
        return size
    with open(path, "rb") as f:
        pos, found = size, 0
        f.seek(max(0, size - 1))
        if size and f.read(1) == b"\n":
            pos -= 1  # the final newline ends the last line; it does not start one
        while pos > 0:
            step = min(_CHUNK, pos)
            f.seek(pos - step)
            block = f.read(step)
            for match in reversed(list(re.finditer(b"\n", block))):
                found += 1
                if found == n:
                    return pos - step + match.start() + 1
            pos -= step
    return 0


class _Tailer:
    """Reads the complete lines appended to one file since the last call.

    ``max_line``: keep at most that many bytes of a line (the rest is dropped as it is read and the
    line ends in " [...]"), so a huge line costs no more memory than a short one.
    """

    def __init__(self, path: Path, offset: int = 0, *, max_line: int | None = None):
        self.path = path
        self.offset = offset
        self.partial = b""
        self.max_line = max_line
        self._cut = False  # the partial line was longer than max_line

    def read(self) -> list[str]:
        if self.max_line is None:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self.offset)
                    data = f.read()
            except OSError:
                return []
            if not data:
                return []
            self.offset += len(data)
            *lines, self.partial = (self.partial + data).split(b"\n")
            return [_clean(line) for line in lines]
        out: list[str] = []
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                while data := f.read(_CHUNK):
                    self.offset += len(data)
                    *lines, rest = (self.partial + data).split(b"\n")
                    for line in lines:
                        out.append(self._bounded(line))
                        self._cut = False
                    self.partial = rest
                    if len(rest) > self.max_line:
                        self.partial, self._cut = rest[:self.max_line], True
        except OSError:
            pass
        return out

    def _bounded(self, raw: bytes) -> str:
        cut = self._cut or len(raw) > self.max_line
        text = _clean(raw[:self.max_line])
        return text + " [...]" if cut else text

    def flush(self) -> list[str]:
        """The last line even without its newline (the file is complete)."""
        rest, self.partial = self.partial, b""
        if not rest.strip():
            return []
        line = self._bounded(rest) if self.max_line is not None else _clean(rest)
        self._cut = False
        return [line]


def read_logs(files: list[tuple[str, Path]], attempt: int, *, tail: int | None = None,
              max_line: int | None = None) -> Iterator[LogLine]:
    """Every line (or the last ``tail`` lines) of each file, replica after replica; lines longer than
    ``max_line`` bytes are cut."""
    for name, path in files:
        tailer = _Tailer(path, _tail_offset(path, tail) if tail is not None else 0, max_line=max_line)
        for text in tailer.read() + tailer.flush():
            yield LogLine(name, attempt, text)


def follow_logs(store: Store, job_id: str, *, attempt: int | None = None, replica: str | None = None,
                tail: int | None = None, poll: float = 0.25,
                refresh: Callable[[Store, str], dict] | None = None) -> Iterator[LogLine]:
    """Yield lines as replicas write them; move to each new attempt after a restart; stop when the job
    (or the one ``attempt`` asked for) has ended and every line is out.

    ``refresh`` reads the job record (default: with Lost detection), so a follow never outlives a
    dead driver.
    """
    if refresh is None:
        from multiworker.status import refresh_liveness as refresh
    switch = attempt is None and replica != SUPERVISOR  # move on to new attempts
    pinned = attempt is not None and replica != SUPERVISOR  # end with this attempt
    current, files = log_files(store, job_id, attempt=attempt, replica=replica)
    tailers = [(name, _Tailer(path, _tail_offset(path, tail) if tail is not None else 0)) for name, path in files]
    while True:
        # Read the state before the logs: once it is terminal, every replica has stopped writing.
        job = refresh(store, job_id)
        done = job.is_terminal or (pinned and _attempt_finished(store, job_id, current))
        for name, tailer in tailers:
            for text in tailer.read():
                yield LogLine(name, current, text)
        newer = latest_attempt(store, job_id) if switch else current
        if newer > current or done:
            for name, tailer in tailers:
                for text in tailer.flush():
                    yield LogLine(name, current, text)
        if newer > current:
            current, files = log_files(store, job_id, attempt=newer, replica=replica)
            tailers = [(name, _Tailer(path)) for name, path in files]
            yield LogLine(None, current, f"--- attempt {current}: the group restarted ---")
            continue
        if done:
            return
        time.sleep(poll)


def _attempt_finished(store: Store, job_id: str, n: int) -> bool:
    return any(a["n"] == n and a["finished_at"] is not None for a in store.attempts(job_id))


# For readers that keep their own position between calls (the dashboard's resumable log stream).
Tailer = _Tailer
tail_offset = _tail_offset
