"""Start and stop one trial's job through the normal job path: a job record for any backend
(``multiworker.jobs.create_job``), driven by ``python -m multiworker.backends.daemon`` as a child
process that the kernel kills if the tuner dies (PR_SET_PDEATHSIG), taking its replicas along."""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

from multiworker import procs
from multiworker.job import Store
from multiworker.spec.load import LoadedSpec

__all__ = ["create_trial_job", "start_job", "stop_job"]

log = logging.getLogger(__name__)


def create_trial_job(store: Store, loaded: LoadedSpec, *, backend: str, trainer_args: list[str],
                     study: str, trial: int, backend_options: Mapping[str, Any] | None = None) -> str:
    """Record the trial's job (tagged with its study and trial in its run options); return its id."""
    from multiworker.jobs import create_job

    job_id = create_job(store, loaded, backend=backend, backend_options=backend_options, trainer_args=trainer_args)
    run = store.get_job(job_id).run
    store.set_run_options(job_id, dataclasses.replace(run, study=study, trial=trial))
    return job_id


def start_job(store: Store, job_id: str) -> subprocess.Popen:
    """Drive the job from a child process (its own session: Ctrl-C reaches the tuner only)."""
    job = store.get_job(job_id)
    env = {**os.environ, "MULTIWORKER_HOME": str(store.home)}
    proc = procs.spawn([sys.executable, "-m", "multiworker.backends.daemon", job_id], cwd=job.job_dir,
                       env=env, log_path=job.layout.supervisor_log)
    store.update_job(job_id, supervisor_pid=proc.pid, heartbeat_at=time.time())
    return proc


def stop_job(store: Store, job_id: str, proc: subprocess.Popen, *, grace: float) -> None:
    """SIGTERM the driver (it stops the job and records Cancelled), SIGKILL after ``grace``; a driver
    that died before it could record anything (still starting) leaves the record to the backend's cancel."""
    from multiworker.monitor.lifecycle import cancel_job

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            log.warning("job %s: driver %d did not stop in %.0fs; killing it", job_id, proc.pid, grace)
            proc.kill()
            proc.wait()
    if not store.get_job(job_id).is_terminal:
        cancel_job(store, job_id, timeout=0)
