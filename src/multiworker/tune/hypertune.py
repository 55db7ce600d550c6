"""The cloudml-hypertune protocol, read back: each report is one JSON line in
CLOUD_ML_HP_METRIC_FILE (default /tmp/hypertune/output.metrics), e.g.
``{"global_step": "500", "rmse": "4.21", "timestamp": 1700000000.0, "trial": "1"}``,
values as strings. The library rewrites the file with its last 100 reports; some trainers append."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

__all__ = ["DEFAULT_METRIC_FILE", "Measurement", "read_measurements", "final_value", "by_step"]

log = logging.getLogger(__name__)

DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"


@dataclasses.dataclass(frozen=True)
class Measurement:
    step: int
    value: float
    timestamp: float


def read_measurements(path: str | Path, tag: str, *, trial: str | None = None,
                      since: float | None = None) -> list[Measurement]:
    """The reports of ``tag`` in the file, in order; only trial ``trial`` and those at or after
    ``since`` when given (for the shared default file). Unreadable lines are skipped."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
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
