"""The cloudml-hypertune protocol, read back: each report is one JSON line in
CLOUD_ML_HP_METRIC_FILE (default /tmp/hypertune/output.metrics), e.g.
``{"global_step": "500", "rmse": "4.21", "timestamp": 1700000000.0, "trial": "1"}``,
values as strings. The library rewrites the file with its last 100 reports; some trainers append.

Each trial gets a file of its own, private to the user (the shared default file is never read: any
local user could write a "best" result there). Only a regular file is read (a symlink, FIFO or
directory is refused), only its last MAX_BYTES, and only lines of this trial (or naming none).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
from pathlib import Path

__all__ = ["DEFAULT_METRIC_FILE", "MAX_BYTES", "MetricFileRefused", "Measurement", "read_measurements",
           "final_value", "by_step"]

log = logging.getLogger(__name__)

DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"
MAX_BYTES = 1 << 20  # the library keeps 100 reports (a few KiB); a bigger file is read from its end


class MetricFileRefused(ValueError):
    """The metric file is not a regular file (a symlink, FIFO, directory...); the message says which."""


def _read_tail(path: Path) -> str | None:
    """The last MAX_BYTES of ``path`` if it is a regular file; None if it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        kind = "a symlink" if path.is_symlink() else exc.strerror
        raise MetricFileRefused(f"the metric file {path} is {kind}: refused; it must be a regular file") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode) else \
            "not a regular file"
        raise MetricFileRefused(f"the metric file {path} is {kind}: refused; it must be a regular file")
    with os.fdopen(fd, "rb") as f:
        if info.st_size > MAX_BYTES:
            f.seek(info.st_size - MAX_BYTES)
            f.readline()  # a line cut in two is no report
        return f.read(MAX_BYTES).decode("utf-8", errors="replace")


@dataclasses.dataclass(frozen=True)
class Measurement:
    step: int
    value: float
    timestamp: float


def read_measurements(path: str | Path, tag: str, *, trial: str | None = None,
                      since: float | None = None) -> list[Measurement]:
    """The reports of ``tag`` in the file, in order; only trial ``trial`` (lines naming another trial
    are dropped) and those at or after ``since`` when given. Unreadable lines are skipped;
    MetricFileRefused if the file is not a regular file."""
    text = _read_tail(Path(path))
    if text is None:
        return []
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
            value = float(record[tag])
        except (ValueError, KeyError, TypeError):
            log.debug("%s: skipped a line without a numeric %r: %.80s", path, tag, line)
            continue
        if trial is not None and str(record.get("trial", trial)) != trial:
            continue
        stamp = _number(record.get("timestamp"), 0.0)
        if since is not None and stamp and stamp < since:
            continue
        out.append(Measurement(step=int(_number(record.get("global_step"), 0)), value=value, timestamp=stamp))
    return out


def _number(value, default: float) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return default


def final_value(measurements: list[Measurement], *, measurement: str, goal: str) -> float | None:
    """The trial's objective value: the last report, or the best one (BEST_MEASUREMENT)."""
    if not measurements:
        return None
    if measurement == "BEST_MEASUREMENT":
        values = [m.value for m in measurements]
        return max(values) if goal == "MAXIMIZE" else min(values)
    return measurements[-1].value


def by_step(measurements: list[Measurement]) -> dict[int, float]:
    """Intermediate values for pruning: the latest report per positive global_step."""
    return {m.step: m.value for m in measurements if m.step > 0}
