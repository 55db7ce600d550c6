"""``LocalBackend``: the group controller over a :class:`LocalGroup` in this process, a watchdog
that kills what a SIGKILLed driver leaves, and cancel / Lost detection from any other process."""

from __future__ import annotations

import logging
import signal
import time
from typing import Any

from multiworker import procs
from multiworker.backends.base import Backend, JobState
from multiworker.backends.controller import GroupController
from multiworker.backends.driver import driver_alive, driver_gone, stop_driver
from multiworker.backends.local.group import LocalGroup
from multiworker.backends.local.watchdog import start_watchdog
from multiworker.store import Store

__all__ = ["LocalBackend"]

log = logging.getLogger(__name__)


def _stop_strays(job_id: str, settle: float = 3.0) -> int:
    """Stop every process still carrying the job's id (after ``settle`` seconds to exit by themselves)."""
    deadline = time.monotonic() + settle
    while (pids := procs.processes_of_job(job_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        procs.signal_group(pid, signal.SIGTERM)
    deadline = time.monotonic() + 3.0
    while pids and time.monotonic() < deadline:
        pids = [p for p in pids if procs.pid_alive(p)]
        time.sleep(0.1)
    for pid in pids:
        procs.signal_group(pid, signal.SIGKILL)
    return len(pids)


class LocalBackend(Backend):
    """Replicas as processes on this machine, supervised by the process that runs the job."""

    name = "local"

    def run(self, store: Store, job_id: str, observer: Any = None) -> JobState:
        watchdog = start_watchdog(job_id)
        try:
            return GroupController(store, job_id, LocalGroup(), observer).run()
        finally:
            watchdog.kill()
            watchdog.wait()

    def cancel(self, store: Store, job: dict, *, timeout: float | None = None) -> dict:
        """SIGTERM the driver (it stops every replica itself: grace period, then SIGKILL); if it is
        gone or does not answer in time, stray replicas are killed here and the job is recorded
        Cancelled. A job that has already ended is returned unchanged."""
        job_id = job["id"]
        if JobState(job["state"]).is_terminal:
            return job
        if job["supervisor_pid"] and driver_alive(job):
            job = stop_driver(store, job, timeout)  # a SIGKILLed driver's replicas die with it (PDEATHSIG)
        if not JobState(job["state"]).is_terminal:
            killed = _stop_strays(job_id, settle=0.0)
            message = "cancelled by `multiworker cancel`; the supervisor was gone"
            if killed:
                message += f"; killed {killed} leftover replica process(es)"
            store.end_job(job_id, JobState.CANCELLED, message, replica_state="Stopped")
        leftover = _stop_strays(job_id)
        if leftover:
            log.warning("job %s: killed %d process(es) left after the supervisor ended", job_id, leftover)
        return store.get_job(job_id)

    def reconcile(self, store: Store, job: dict) -> dict:
        """A job whose driver is gone is recorded Lost, and any stray replica is killed."""
        job_id = job["id"]
        if JobState(job["state"]).is_terminal:
            return job
        why = driver_gone(job)
        if why is None:
            return job
        job = store.get_job(job_id)  # it may have finished between the first read and the pid check
        if JobState(job["state"]).is_terminal:
            return job
        strays = procs.processes_of_job(job_id)
        for pid in strays:
            procs.signal_group(pid, signal.SIGKILL)
        if strays:
            why += f"; killed {len(strays)} leftover replica process(es)"
        log.info("job %s: %s", job_id, why)
        store.end_job(job_id, JobState.LOST, why, replica_state="Lost")
        return store.get_job(job_id)
