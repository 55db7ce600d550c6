"""A CustomJob's state mirrored into the store: the job's state, per-replica states, events, the end.

Vertex AI gives no per-task state in the CustomJob object; a replica is shown ``Pending`` until its
first log line arrives, ``Running`` after it while the job runs, and the job's final state at the end.
"""

from __future__ import annotations

import json
import logging
import time

from multiworker.backends.base import JobState

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


def mirror(store, job_id: str, remote: dict, replicas: list[str], active: set[str]) -> JobState:
    """Record ``remote`` (a CustomJob as REST JSON): job state, replica states, a state-change event."""
    state = job_state(remote)
    job = store.get_job(job_id)
    handle = json.loads(job["handle_json"] or "{}")
    if handle.get("remote_state") != remote.get("state"):
        store.add_event(job_id, "VertexState", f"{remote.get('state')}", warning=state is JobState.FAILED)
        handle["remote_state"] = remote.get("state")
        store.update_job(job_id, handle_json=json.dumps(handle))
    fields = {"state": state.value, "heartbeat_at": time.time()}
    if state is JobState.RUNNING and not job["started_at"]:
        fields["started_at"] = time.time()
    if not state.is_terminal:
        store.update_job(job_id, **fields)
    for name in replicas:
        role, _, index = name.rpartition("-")
        if state.is_terminal:
            replica_state = state.value
        elif state is JobState.RUNNING and name in active:
            replica_state = JobState.RUNNING.value
        else:
            replica_state = JobState.PENDING.value
        store.upsert_replica(job_id, role, int(index), state=replica_state)
    return state


def finish(store, job_id: str, remote: dict, state: JobState) -> str:
    """End the job's record in ``state``; return its message (the CustomJob's ``error.message``)."""
    message = _message(remote, state)
    store.update_job(job_id, state=state.value, finished_at=time.time(), message=message or None)
    store.end_attempt(job_id, 0, state.value)
    reason = {JobState.SUCCEEDED: "Succeeded", JobState.CANCELLED: "Cancelled"}.get(state, "Failed")
    store.add_event(job_id, reason, message, warning=state is JobState.FAILED)
    return message
