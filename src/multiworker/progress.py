"""How far training got, read from what replicas print: the global step each replica reached, and
the step an attempt resumed from. Three sources, so tutorial trainers are covered too:

- ``MULTIWORKER_METRIC`` progress and epoch lines (``multiworker.trainer``, or any trainer that prints them);
- Keras's progress bar as it prints without a terminal (``Epoch 2/3`` then `` 37/100 [====...``);
- ``multiworker.trainer``'s log lines ``resuming from the backup taken at epoch E, step S`` and
  ``a peer was lost: backed up epoch E, step S``.

Steps are counted from the start of training, across epochs (``(epoch - 1) * steps + step``).
Standard library only.
"""

from __future__ import annotations

import re

__all__ = ["StepTracker", "keras_progress"]

_KERAS_EPOCH = re.compile(r"^Epoch (\d+)/(\d+)\s*$")
_KERAS_BAR = re.compile(r"^\s*(\d+)/(\d+) \[[=>.]*\]")
_RESUMING = re.compile(r"resuming from the backup taken at epoch (\d+), step (\d+)")
_BACKED_UP = re.compile(r"backed up epoch (\d+), step (\d+)")


def keras_progress(line: str) -> tuple[str, int, int] | None:
    """``("epoch", n, of)`` for Keras's ``Epoch n/of`` line, ``("bar", step, steps)`` for a progress-bar line."""
    if m := _KERAS_EPOCH.match(line):
        return "epoch", int(m.group(1)), int(m.group(2))
    if m := _KERAS_BAR.match(line):
        return "bar", int(m.group(1)), int(m.group(2))
    return None


class StepTracker:
    """Per attempt: the highest global step any replica reached, and the step the attempt resumed
    from (known once its first report arrives)."""

    def __init__(self) -> None:
        self.attempt = 0
        self.reached: dict[int, int] = {}  # attempt -> highest global step reported
        self.resumed: dict[int, int] = {}  # attempt -> the global step it resumed from
        self.by_replica: dict[str, int] = {}  # this attempt's highest step per replica
        self._epoch: dict[str, int] = {}  # Keras's current epoch per replica (from "Epoch n/of")
        self.steps_per_epoch: int | None = None

    def new_attempt(self, attempt: int) -> None:
        self.attempt = attempt
        self.by_replica = {}
        self._epoch = {}

    def _global(self, epoch: int, step: int, steps: int | None) -> int | None:
        steps = steps or self.steps_per_epoch
        if steps:
            self.steps_per_epoch = steps
            return (max(epoch, 1) - 1) * steps + step
        return step if epoch <= 1 else None

    def _report(self, replica: str, step: int | None, *, resumed: int | None = None) -> None:
        if resumed is not None:
            self.resumed.setdefault(self.attempt, resumed)
        if step is None:
            return
        self.by_replica[replica] = max(self.by_replica.get(replica, 0), step)
        self.reached[self.attempt] = max(self.reached.get(self.attempt, 0), step)

    def observe_metric(self, replica: str, metric: dict) -> None:
        epoch, step, steps = metric.get("epoch"), metric.get("step"), metric.get("steps")
        if not isinstance(epoch, int) or not isinstance(steps, int | None):
            return
        if metric.get("kind") == "progress" and isinstance(step, int):
            # the first report without a resume line: training began at this epoch's start
            self._report(replica, self._global(epoch, step, steps), resumed=self._global(epoch, 0, steps))
        elif metric.get("kind") == "epoch" and isinstance(steps, int):
            start = metric.get("start_step") if isinstance(metric.get("start_step"), int) else 0
            self._report(replica, self._global(epoch, steps, steps), resumed=self._global(epoch, start, steps))

    def observe_line(self, replica: str, line: str) -> None:
        if m := _RESUMING.search(line):
            epoch, step = int(m.group(1)), int(m.group(2))
            self._report(replica, None, resumed=self._global(epoch, step, None))
            return
        if m := _BACKED_UP.search(line):  # the step a replica reached when it saved after a peer loss
            self._report(replica, self._global(int(m.group(1)), int(m.group(2)), None))
            return
        parsed = keras_progress(line)
        if parsed is None:
            return
        kind, a, b = parsed
        if kind == "epoch":
            self._epoch[replica] = a
            return
        epoch = self._epoch.get(replica, 1)
        # Keras prints its first bar after the first step trained: the attempt resumed one step before
        self._report(replica, self._global(epoch, a, b), resumed=self._global(epoch, max(a - 1, 0), b))

    def step_of(self, replica: str) -> int | None:
        """The replica's highest step this attempt; a replica that reports nothing follows the job's."""
        if replica in self.by_replica:
            return self.by_replica[replica]
        return max(self.by_replica.values(), default=None)

    def lost(self, attempt: int) -> tuple[int, int] | None:
        """(step reached in ``attempt``, step the next attempt resumed from), once both are known."""
        if attempt not in self.reached or attempt + 1 not in self.resumed:
            return None
        return self.reached[attempt], self.resumed[attempt + 1]
