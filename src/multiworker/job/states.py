"""The state vocabulary of jobs and replicas, in Kubernetes' spelling; the ``str`` values are what
the store holds and what ``status --json`` prints."""

from __future__ import annotations

import enum

__all__ = ["JobState", "ReplicaState"]


class JobState(str, enum.Enum):
    """A job's state."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    LOST = "Lost"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL_JOB

    @property
    def exit_code(self) -> int:
        """The launcher's exit code for a job that ended in this state."""
        return {JobState.SUCCEEDED: 0, JobState.CANCELLED: 130}.get(self, 1)

    def __str__(self) -> str:
        return self.value


class ReplicaState(str, enum.Enum):
    """One replica's state in its latest attempt (a pod's phase, for Kubernetes)."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    STOPPED = "Stopped"  # stopped by multiworker (a restart, a cancel, the success policy)
    CANCELLED = "Cancelled"  # the platform cancelled the job it belonged to
    LOST = "Lost"  # its driver died; nobody knows how it ended
    UNKNOWN = "Unknown"  # Kubernetes lost contact with the pod's node

    @property
    def is_live(self) -> bool:
        return self in (ReplicaState.PENDING, ReplicaState.RUNNING)

    @classmethod
    def of(cls, value: str | None) -> ReplicaState:
        """A recorded or reported state; one this vocabulary lacks reads as Unknown."""
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN

    def __str__(self) -> str:
        return self.value


_TERMINAL_JOB = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST})
