"""Exceptions raised by multiworker.

    MultiworkerError
    ├── UserError              bad input: printed as one line, exit code 2
    │   ├── SpecError          a job spec (file + field) is invalid
    │   └── JobNotFound        a JOB_ID matches no job, or several
    └── BackendError           a backend could not do what was asked
        └── StartFailed        a group could not place or start an attempt's replicas; the
                               restart policy retries it (resources busy, a node gone)
"""

from __future__ import annotations

__all__ = ["MultiworkerError", "UserError", "SpecError", "JobNotFound", "BackendError", "StartFailed"]


class MultiworkerError(Exception):
    """Base of every error multiworker raises on purpose."""


class UserError(MultiworkerError):
    """The user's input is wrong; the message says how to fix it."""

    exit_code = 2


class SpecError(UserError):
    """A job spec is invalid. ``str()`` is ``FILE: FIELD: MESSAGE``."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.message = message
        parts = [p for p in (source, field) if p]
        super().__init__(": ".join([*parts, message]))


class JobNotFound(UserError):
    """No job (or more than one) matches the given id."""


class BackendError(MultiworkerError):
    """A backend failed to submit, watch or stop a job."""


class StartFailed(BackendError):
    """A replica group could not place or start this attempt; retrying may succeed. The group
    controller routes it through the restart policy, as a failed attempt."""
