"""A CustomJob's state mirrored into the store: the job's state, per-replica states, events, the end.

Vertex AI gives no per-task state in the CustomJob object; a replica is shown ``Pending`` until its
first log line arrives, ``Running`` after it while the job runs, and the job's final state at the end.
"""

from __future__ import annotations

import logging
import time

from multiworker.cluster import ReplicaId
from multiworker.job import JobState, Journal, ReplicaState

__all__ = ["STATES", "job_state", "mirror", "finish"]

log = logging.getLogger(__name__)

# JobState of projects.locations.customJobs (REST reference, "JobState") -> multiworker's states.
STATES = {
    "JOB_STATE_UNSPECIFIED": JobState.PENDING,
    "JOB_STATE_QUEUED": JobState.PENDING,
    "JOB_STATE_PENDING": JobState.PENDING,
    "JOB_STATE_PAUSED": JobState.PENDING,
    "JOB_STATE_RUNNING": JobState.RUNNING,
    "JOB_STATE_UPDATING": JobState.RUNNING,
    "JOB_STATE_CANCELLING": JobState.RUNNING,
    "JOB_STATE_SUCCEEDED": JobState.SUCCEEDED,
    "JOB_STATE_PARTIALLY_SUCCEEDED": JobState.FAILED,
    "JOB_STATE_FAILED": JobState.FAILED,
    "JOB_STATE_EXPIRED": JobState.FAILED,
    "JOB_STATE_CANCELLED": JobState.CANCELLED,
}


def job_state(remote: dict) -> JobState:
    return STATES.get(remote.get("state", ""), JobState.PENDING)


def _message(remote: dict, state: JobState) -> str:
    error = (remote.get("error") or {}).get("message")
    if error:
        return error
    return {"JOB_STATE_SUCCEEDED": "the CustomJob succeeded",
            "JOB_STATE_CANCELLED": "the CustomJob was cancelled",
            "JOB_STATE_EXPIRED": "the CustomJob expired before it could run",
            "JOB_STATE_PARTIALLY_SUCCEEDED": "Vertex AI reports the CustomJob partially succeeded"}.get(
        remote.get("state", ""), f"Vertex AI: {remote.get('state', '?')}" if state.is_terminal else "")


def mirror(journal: Journal, remote: dict, replicas: list[str], active: set[str]) -> JobState:
    """Record ``remote`` (a CustomJob as REST JSON): job state, replica states, a state-change event."""
    state = job_state(remote)
    job = journal.current()
    if job.handle.get("remote_state") != remote.get("state"):
        journal.event("VertexState", f"{remote.get('state')}", warning=state is JobState.FAILED)
        journal.set_handle({**job.handle, "remote_state": remote.get("state")})
    if not state.is_terminal:
        started = time.time() if state is JobState.RUNNING and not job.started_at else job.started_at
        journal.set_state(state, started_at=started, heartbeat_at=time.time())
    for name in replicas:
        if state.is_terminal:
            replica_state = ReplicaState(state.value)
        elif state is JobState.RUNNING and name in active:
            replica_state = ReplicaState.RUNNING
        else:
            replica_state = ReplicaState.PENDING
        journal.replica(ReplicaId.parse(name), replica_state)
    return state


def finish(journal: Journal, remote: dict, state: JobState) -> JobState:
    """End the job's record in ``state``, with the CustomJob's ``error.message`` as its message."""
    journal.end_attempt(0, state.value)
    reason = {JobState.SUCCEEDED: "Succeeded", JobState.CANCELLED: "Cancelled"}.get(state, "Failed")
    return journal.finish(state, _message(remote, state), reason=reason, warning=state is JobState.FAILED)
