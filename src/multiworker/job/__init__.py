"""The job core: the state vocabulary, the log layout, the store, the typed job record and the
journal (the one writer of a running job). Below the backends; above the spec, cluster and policy."""

from __future__ import annotations

from multiworker.job.journal import Journal
from multiworker.job.layout import LogLayout
from multiworker.job.observer import NullObserver, Observer
from multiworker.job.record import JobRecord, RunOptions
from multiworker.job.states import JobState, ReplicaState
from multiworker.job.store import MIGRATIONS, SCHEMA_VERSION, Store, new_job_id

__all__ = ["Journal", "LogLayout", "NullObserver", "Observer", "JobRecord", "RunOptions", "JobState",
           "ReplicaState", "Store", "new_job_id", "MIGRATIONS", "SCHEMA_VERSION"]
