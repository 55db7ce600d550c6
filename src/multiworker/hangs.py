"""When a job counts as hung: no replica has advanced for the hang timeout (pure; table-tested).

Advancing is any new output from any replica (log lines, metric lines, Keras's progress bar): a
replica waiting in a collective for a stuck peer prints nothing, while one that trains, loads data
or saves usually does. Reports of training steps (metric lines, Keras's progress bar) also tell the
derived timeout how long this job's quiet stretches are.

- ``run_policy.hang_timeout`` set: the job is hung once every replica has been quiet that long
  while training; before the first step report (TensorFlow's import, connecting the cluster, loading
  data) the allowance is at least :data:`DERIVED_FLOOR`, so a group stuck before its first step is
  found too, and a slow start on a busy machine is not taken for a hang.
- not set: derived from the job's own pace once training has reported its first step:
  :data:`DERIVED_FACTOR` times the longest quiet stretch seen since, at least :data:`DERIVED_FLOOR`.
  Before the first step report nothing counts as a hang (startup may download data for an hour).
- ``0``: off.
"""

from __future__ import annotations

__all__ = ["HangWatch", "DERIVED_FACTOR", "DERIVED_FLOOR"]

#: the derived timeout: this many times the longest quiet stretch seen while training...
DERIVED_FACTOR = 20.0
#: ...and never less than this many seconds
DERIVED_FLOOR = 120.0


class HangWatch:
    """Feed it activity and step reports with a monotonic clock; ask ``quiet_for(now)``."""

    def __init__(self, timeout: float | None):
        self.configured = timeout
        self._last = 0.0
        self._training = False
        self._longest_gap = 0.0

    def new_attempt(self, now: float) -> None:
        self._last = now
        self._training = False
        self._longest_gap = 0.0

    def activity(self, now: float) -> None:
        """Some replica printed something."""
        if self._training:
            self._longest_gap = max(self._longest_gap, now - self._last)
        self._last = max(self._last, now)

    def step(self, now: float) -> None:
        """Some replica reported a training step."""
        self.activity(now)
        self._training = True

    @property
    def timeout(self) -> float | None:
        """The timeout in force now: None while none applies (off, or derived before training began)."""
        if self.configured is not None:
            if not self.configured:
                return None
            return self.configured if self._training else max(self.configured, DERIVED_FLOOR)
        if not self._training:
            return None
        return max(DERIVED_FLOOR, DERIVED_FACTOR * self._longest_gap)

    @property
    def last_activity(self) -> float:
        return self._last

    def hung(self, now: float) -> float | None:
        """Seconds every replica has been quiet, once that reaches the timeout; else None."""
        limit = self.timeout
        quiet = now - self._last
        return quiet if limit is not None and quiet >= limit else None
