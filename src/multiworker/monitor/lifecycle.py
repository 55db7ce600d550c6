"""Ending and removing jobs: ``cancel`` (clean stop of a running job), ``delete`` and ``gc``."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import time
from pathlib import Path

from multiworker.backends.local import procs
from multiworker.errors import UserError
from multiworker.status import refresh_liveness, supervisor_alive
from multiworker.store import TERMINAL_STATES, Store

__all__ = ["cancel_job", "delete_job", "gc_jobs"]

log = logging.getLogger(__name__)

_EXTRA_WAIT = 20.0  # beyond the job's grace period, for the supervisor to stop replicas and record the end


def _grace_period(job: dict) -> float:
    policy = json.loads(job["spec_json"]).get("run_policy") or {}
    return float(policy.get("grace_period", 10.0))


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


def _wait_supervisor(store: Store, job_id: str, pid: int, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        job = store.get_job(job_id)
        if job["state"] in TERMINAL_STATES or not procs.pid_alive(pid) or time.monotonic() > deadline:
            return job
        time.sleep(0.1)


def cancel_job(store: Store, job_id: str, *, timeout: float | None = None) -> dict:
    """Stop a running job cleanly and return its record (state Cancelled, no replica left).

    The supervisor gets SIGTERM and stops every replica itself (grace period, then SIGKILL);
    if it is gone or does not answer in time, stray replicas are killed here and the job is
    marked Cancelled. A job that has already ended is returned unchanged.
    """
    job = store.get_job(job_id)
    if job["state"] in TERMINAL_STATES:
        return job
    pid = job["supervisor_pid"]
    if pid and supervisor_alive(job):
        log.info("job %s: SIGTERM to supervisor pid %s", job_id, pid)
        os.kill(pid, signal.SIGTERM)
        wait = timeout if timeout is not None else _grace_period(job) + _EXTRA_WAIT
        job = _wait_supervisor(store, job_id, pid, wait)
        if job["state"] not in TERMINAL_STATES and procs.pid_alive(pid):
            log.warning("job %s: the supervisor did not stop in %.0fs; killing it", job_id, wait)
            os.kill(pid, signal.SIGKILL)  # its replicas die with it (PDEATHSIG); strays are stopped below
            job = _wait_supervisor(store, job_id, pid, 5.0)
    if job["state"] not in TERMINAL_STATES:
        killed = _stop_strays(job_id, settle=0.0)
        message = "cancelled by `multiworker cancel`; the supervisor was gone"
        if killed:
            message += f"; killed {killed} leftover replica process(es)"
        _record_cancelled(store, job_id, message)
    leftover = _stop_strays(job_id)
    if leftover:
        log.warning("job %s: killed %d process(es) left after the supervisor ended", job_id, leftover)
    return store.get_job(job_id)


def _record_cancelled(store: Store, job_id: str, message: str) -> None:
    now = time.time()
    with store.transaction() as conn:
        row = conn.execute("SELECT state FROM jobs WHERE id = ?", (job_id,)).fetchone()
        if row["state"] in TERMINAL_STATES:
            return
        conn.execute("UPDATE jobs SET state = 'Cancelled', finished_at = ?, message = ? WHERE id = ?",
                     (now, message, job_id))
        conn.execute("UPDATE replicas SET state = 'Stopped', finished_at = ? "
                     "WHERE job_id = ? AND state IN ('Pending', 'Running')", (now, job_id))
        conn.execute("INSERT INTO events (job_id, ts, type, reason, replica, message) VALUES (?, ?, ?, ?, ?, ?)",
                     (job_id, now, "Warning", "Cancelled", None, message))


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def delete_job(store: Store, job_id: str, *, force: bool = False) -> dict:
    """Remove a finished job's records and its directory (logs, and the output when it lives there).

    A running job is refused unless ``force``, which cancels it first. An output directory the
    spec placed elsewhere is the user's and is kept.
    """
    job = refresh_liveness(store, job_id)
    if job["state"] not in TERMINAL_STATES:
        if not force:
            raise UserError(f"job {job_id} is {job['state']}; cancel it first (`multiworker cancel {job_id}`) "
                            "or pass --force")
        job = cancel_job(store, job_id)
    removed, kept = [], []
    job_dir = Path(job["job_dir"]) if job["job_dir"] else None
    if job_dir is not None and job_dir.exists():
        if _inside(job_dir, store.home / "jobs") and job_dir.resolve() != (store.home / "jobs").resolve():
            shutil.rmtree(job_dir)
            removed.append(str(job_dir))
        else:
            kept.append(str(job_dir))
    output = Path(job["output_dir"]) if job["output_dir"] else None
    if output is not None and output.exists() and (job_dir is None or not _inside(output, job_dir)):
        kept.append(str(output))
    store.delete_job(job_id)
    log.info("deleted job %s (removed %s, kept %s)", job_id, removed, kept)
    return {"id": job_id, "name": job["name"], "state": job["state"], "removed": removed, "kept": kept}


def gc_jobs(store: Store, older_than: float, *, dry_run: bool = False) -> list[dict]:
    """Delete jobs that ended more than ``older_than`` seconds ago; return what was (or would be) deleted."""
    for job in store.list_jobs():
        if job["state"] not in TERMINAL_STATES:
            refresh_liveness(store, job["id"])
    out = []
    for job in store.finished_before(time.time() - older_than):
        if dry_run:
            out.append({"id": job["id"], "name": job["name"], "state": job["state"], "removed": [], "kept": []})
        else:
            out.append(delete_job(store, job["id"]))
    return out
