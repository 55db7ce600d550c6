"""When to back up training state: parsing ``backup_every`` and choosing the step interval (pure).

A kill should cost the restart's start-up plus a few seconds of training, not an epoch: backups
are taken every few seconds of training, counted in steps so that all workers of a
MultiWorkerMirroredStrategy group save at the same step (saving reads metric variables, which
is a collective).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["AUTO_SECONDS", "MAX_COST", "BackupSchedule", "parse_backup_every", "steps_between_backups"]

#: "auto" backs up about every this many seconds of training (a kill loses half of it on average) ...
AUTO_SECONDS = 2.0
#: ... stretched so that saving takes at most this share of the training time (the issue's bound is
#: 2%; 1.5% leaves room for a save that runs slower than the one measured).
MAX_COST = 0.015

_SECONDS = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*s\s*$")


@dataclass(frozen=True)
class BackupSchedule:
    """``mode`` is "epoch", "steps" (every ``steps``) or "seconds" (about every ``seconds``,
    at most ``max_cost`` of the training time spent saving when ``max_cost`` is set)."""

    mode: str
    steps: int | None = None
    seconds: float | None = None
    max_cost: float | None = None


def parse_backup_every(value: str | int | float | None) -> BackupSchedule:
    """``"auto"`` (or None), ``"epoch"``, an integer number of steps (``100``, ``"100"``), or
    seconds of training (``"10s"``, ``10.0``). Raises ValueError with the accepted forms."""
    if value is None or value == "auto":
        return BackupSchedule("seconds", seconds=AUTO_SECONDS, max_cost=MAX_COST)
    if value == "epoch":
        return BackupSchedule("epoch")
    if isinstance(value, bool):
        raise ValueError(f"backup_every={value!r}: expected 'auto', 'epoch', steps (100) or seconds ('10s')")
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        steps = int(value)
        if steps >= 1:
            return BackupSchedule("steps", steps=steps)
    elif isinstance(value, float) and value > 0:
        return BackupSchedule("seconds", seconds=float(value))
    elif isinstance(value, str) and (match := _SECONDS.match(value)) and float(match.group(1)) > 0:
        return BackupSchedule("seconds", seconds=float(match.group(1)))
    raise ValueError(f"backup_every={value!r}: expected 'auto', 'epoch', a number of steps >= 1 (100) "
                     "or seconds of training ('10s')")


def steps_between_backups(step_seconds: float, save_seconds: float, schedule: BackupSchedule) -> int:
    """Steps from one backup to the next for a seconds schedule, given the measured seconds per
    training step and per save: about ``schedule.seconds`` of training, or longer when saving
    would otherwise cost more than ``schedule.max_cost`` of it."""
    seconds = schedule.seconds or AUTO_SECONDS
    if schedule.max_cost:
        seconds = max(seconds, save_seconds / schedule.max_cost)
    return max(1, math.ceil(seconds / max(step_seconds, 1e-6)))
