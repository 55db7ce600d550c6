"""The driver of a job supervised here (``local``, ``ray``): the process that runs its group
controller, recorded as ``jobs.supervisor_pid`` with a heartbeat. Whether it still runs, why it is
gone, and stopping it from another process."""

from __future__ import annotations

import logging
import os
import signal
import time

from multiworker import procs
from multiworker.job import JobRecord, JobState, Store

__all__ = ["driver_alive", "driver_gone", "stop_driver", "PENDING_GRACE"]

log = logging.getLogger(__name__)

# A Pending job whose launcher never recorded a driver is given this long to start.
PENDING_GRACE = 60.0
# Beyond the job's grace period, for the driver to stop its replicas and record the end.
_EXTRA_WAIT = 20.0


def driver_alive(job: JobRecord) -> bool:
    """Whether the job's driver process still exists (and is not a later process reusing its pid)."""
    return procs.same_process(job.supervisor_pid, job.last_seen)


def driver_gone(job: JobRecord) -> str | None:
    """Why a job that claims to run has no driver, or None while it has one (or may still get one).

    A driver records the final state before it exits, so a dead driver with a live state means it
    died abruptly: SIGKILL, the OOM killer, a reboot.
    """
    now = time.time()
    if job.supervisor_pid is None:
        if job.state is not JobState.PENDING or now - job.created_at < PENDING_GRACE:
            return None
        return f"the launcher never started a supervisor ({now - job.created_at:.0f}s ago)"
    if driver_alive(job):
        return None
    heartbeat = job.heartbeat_at or job.created_at
    return f"the supervisor (pid {job.supervisor_pid}) is gone; last heartbeat {now - heartbeat:.0f}s ago"


def _wait(store: Store, job_id: str, pid: int, timeout: float) -> JobRecord:
    deadline = time.monotonic() + timeout
    while True:
        job = store.get_job(job_id)
        if job.is_terminal or not procs.pid_alive(pid) or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def stop_driver(store: Store, job: JobRecord, timeout: float | None = None) -> JobRecord:
    """SIGTERM the driver, which stops every replica itself and records Cancelled; SIGKILL it if it
    has not ended within ``timeout`` seconds (default: the job's grace period + 20 s). Returns the
    job's record as it is then (still not terminal if the driver was killed)."""
    job_id, pid = job.id, job.supervisor_pid
    if not pid or not driver_alive(job):
        return store.get_job(job_id)
    log.info("job %s: SIGTERM to supervisor pid %s", job_id, pid)
    os.kill(pid, signal.SIGTERM)
    wait = timeout if timeout is not None else job.spec.run_policy.grace_period + _EXTRA_WAIT
    job = _wait(store, job_id, pid, wait)
    if not job.is_terminal and procs.pid_alive(pid):
        log.warning("job %s: the supervisor did not stop in %.0fs; killing it", job_id, wait)
        os.kill(pid, signal.SIGKILL)
        job = _wait(store, job_id, pid, 5.0)
    return job
