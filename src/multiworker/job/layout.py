"""Where a job's files live: ``<job_dir>/attempt_<n>/<role>-<index>.log`` and friends. The one
definition of the layout: writers (the journal, every backend) and readers (``logs``, ``status``,
the dashboard) both ask it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

__all__ = ["LogLayout"]


@dataclasses.dataclass(frozen=True)
class LogLayout:
    """The files of the job whose directory is ``job_dir``."""

    job_dir: Path

    def attempt_dir(self, attempt: int) -> Path:
        return self.job_dir / f"attempt_{attempt}"

    def replica_log(self, attempt: int, replica: str) -> Path:
        return self.attempt_dir(attempt) / f"{replica}.log"

    def stacks_dir(self, attempt: int) -> Path:
        """Python stacks of every replica, one folder per dump (``<time>-<why>/<replica>.txt``)."""
        return self.attempt_dir(attempt) / "stacks"

    @property
    def stacks_request(self) -> Path:
        """Written by ``multiworker stacks`` to ask the job's driver for a live dump."""
        return self.job_dir / "stacks.request"

    @property
    def supervisor_log(self) -> Path:
        return self.job_dir / "supervisor.log"

    @property
    def final_state(self) -> Path:
        """The driver's final state, reserved ahead (:mod:`multiworker.job.final_state`)."""
        return self.job_dir / "final-state.json"  # final_state.NAME

    @property
    def spec_file(self) -> Path:
        return self.job_dir / "spec.json"
