"""The typed job record: one row of the ``jobs`` table, decoded once, here.

``spec_json``, ``options_json`` and ``handle_json`` are the store's encoding; everything above the
store sees a :class:`JobRecord` with the spec as a :class:`~multiworker.spec.model.JobSpec`, the run
options as :class:`RunOptions`, the backend's options and handle as dicts (the backend validates its
options with its own model), and the states as enums.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import Any

from multiworker.job.layout import LogLayout
from multiworker.job.states import JobState
from multiworker.spec.model import JobSpec

__all__ = ["JobRecord", "RunOptions", "JOB_COLUMNS"]

# Columns Store.update_job may set: every plain column but the id (the JSON-encoded spec, options and
# handle have typed setters); a name outside this set is a bug, not a new column.
JOB_COLUMNS = frozenset({"name", "state", "backend", "format", "spec_path", "base_dir", "output_dir", "job_dir",
                         "created_at", "started_at", "finished_at", "heartbeat_at", "restarts", "supervisor_pid",
                         "message"})


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """What ``run`` (or ``tune``) asked of the job's driver beside the spec."""

    trainer_args: tuple[str, ...] = ()
    inject_failures: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # the format's and the backend's notes, printed when the job was created
    study: str | None = None  # a tuning trial's study and trial number
    trial: int | None = None
    map_paths: tuple[str, ...] = ()  # gs://BUCKET[/PREFIX]=/dir: served to the replicas by the storage stand-in

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunOptions:
        return cls(trainer_args=tuple(data.get("trainer_args") or ()),
                   inject_failures=tuple(data.get("inject_failures") or ()),
                   notes=tuple(data.get("notes") or ()), study=data.get("study"), trial=data.get("trial"),
                   map_paths=tuple(data.get("map_paths") or ()))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"trainer_args": list(self.trainer_args), "inject_failures": list(self.inject_failures),
                               "notes": list(self.notes)}
        if self.study is not None:
            out.update(study=self.study, trial=self.trial)
        if self.map_paths:
            out["map_paths"] = list(self.map_paths)
        return out


@dataclasses.dataclass(frozen=True)
class JobRecord:
    """A job as recorded. Immutable: read it again (``Store.get_job``) to see later writes."""

    id: str
    name: str
    state: JobState
    backend: str
    format: str | None
    spec_path: str | None
    base_dir: Path
    output_dir: str
    job_dir: Path
    created_at: float
    started_at: float | None
    finished_at: float | None
    heartbeat_at: float | None
    restarts: int
    supervisor_pid: int | None
    message: str | None
    run: RunOptions
    backend_options: dict[str, Any]
    handle: dict[str, Any]
    spec_json: dataclasses.InitVar[str] = "{}"

    def __post_init__(self, spec_json: str) -> None:
        object.__setattr__(self, "_spec_json", spec_json)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> JobRecord:
        options = json.loads(row.get("options_json") or "{}")
        return cls(
            id=row["id"], name=row["name"], state=JobState(row["state"]), backend=row["backend"],
            format=row.get("format"), spec_path=row.get("spec_path"), base_dir=Path(row.get("base_dir") or "."),
            output_dir=row.get("output_dir") or "", job_dir=Path(row.get("job_dir") or "."),
            created_at=row["created_at"], started_at=row.get("started_at"), finished_at=row.get("finished_at"),
            heartbeat_at=row.get("heartbeat_at"), restarts=row.get("restarts") or 0,
            supervisor_pid=row.get("supervisor_pid"), message=row.get("message"),
            run=RunOptions.from_dict(options), backend_options=dict(options.get("backend_options") or {}),
            handle=json.loads(row.get("handle_json") or "null") or {}, spec_json=row["spec_json"],
        )

    @functools.cached_property
    def spec(self) -> JobSpec:
        """The resolved spec the job was created with (decoded on first use)."""
        return JobSpec.model_validate_json(self._spec_json)  # type: ignore[attr-defined]

    @property
    def spec_dict(self) -> dict[str, Any]:
        """The spec as recorded (only the fields it was given), for ``describe``."""
        return json.loads(self._spec_json)  # type: ignore[attr-defined]

    @property
    def layout(self) -> LogLayout:
        return LogLayout(self.job_dir)

    @property
    def is_terminal(self) -> bool:
        return self.state.is_terminal

    @property
    def last_seen(self) -> float:
        """The driver's latest sign of life: heartbeat, else start, else creation."""
        return self.heartbeat_at or self.started_at or self.created_at
