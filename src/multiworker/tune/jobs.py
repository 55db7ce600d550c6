"""Start and stop one trial's job through the normal job path: a job record in the store, run by
the backend's supervisor as a child process that dies with the tuner (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from multiworker.errors import UserError
from multiworker.spec.load import LoadedSpec
from multiworker.store import TERMINAL_STATES, Store

__all__ = ["create_trial_job", "start_job", "stop_job"]

log = logging.getLogger(__name__)


def create_trial_job(store: Store, loaded: LoadedSpec, *, backend: str, trainer_args: list[str],
                     study: str, trial: int) -> str:
    """Record the trial's job (tagged with its study and trial in options_json); return its id."""
    try:
        create_job = importlib.import_module("multiworker.jobs").create_job
    except ModuleNotFoundError:  # before the backend seam: the local backend's job API
        if backend != "local":
            raise UserError(f"--backend {backend}: this build runs trials on the local backend only") from None
        from multiworker.backends.local import create_job

        job_id = create_job(store, loaded, trainer_args=trainer_args)
    else:
        job_id = create_job(store, loaded, backend=backend, trainer_args=trainer_args)
    options = json.loads(store.get_job(job_id)["options_json"] or "{}")
    store.update_job(job_id, options_json=json.dumps({**options, "study": study, "trial": trial}))
    return job_id


def _daemon_module() -> str:
    name = "multiworker.backends.daemon"  # any backend, once the seam provides it
    return name if importlib.util.find_spec(name) else "multiworker.backends.local.daemon"


def start_job(store: Store, job_id: str) -> subprocess.Popen:
    """Run the job's supervisor as a child that the kernel kills if the tuner dies."""
    from multiworker.backends.local import procs

    job = store.get_job(job_id)
    env = {**os.environ, "MULTIWORKER_HOME": str(store.home)}
    proc = procs.spawn([sys.executable, "-m", _daemon_module(), job_id], cwd=Path(job["job_dir"]), env=env,
                       log_path=Path(job["job_dir"]) / "supervisor.log")
    store.update_job(job_id, supervisor_pid=proc.pid, heartbeat_at=time.time())
    return proc


def stop_job(store: Store, job_id: str, proc: subprocess.Popen, *, grace: float) -> None:
    """SIGTERM the supervisor (it stops every replica and records Cancelled); SIGKILL after ``grace``.

    A supervisor still starting may die of the signal before it can record anything (its replicas
    die with it): the job is then recorded Cancelled here.
    """
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log.warning("supervisor %d did not stop in %.0fs; killing it", proc.pid, grace)
            proc.kill()
            proc.wait()
    if store.get_job(job_id)["state"] not in TERMINAL_STATES:
        message = "cancelled by the tuner as its supervisor started"
        store.update_job(job_id, state="Cancelled", finished_at=time.time(), message=message)
        store.add_event(job_id, "Cancelled", message)
