"""A job driven in the background, independent of the terminal that started it (``run --detach``):
``python -m multiworker.backends.daemon JOB_ID`` runs the job's own backend to its end."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

from multiworker.backends.base import get_backend
from multiworker.job import JobState, Store
from multiworker.private_files import open_private

__all__ = ["start_detached", "main"]

log = logging.getLogger(__name__)


def start_detached(store: Store, job_id: str, *, wait_running: float = 10.0) -> int:
    """Start the job's driver in its own session, output to ``supervisor.log`` (0600); wait up to
    ``wait_running`` seconds for it to leave Pending; return its pid."""
    job = store.get_job(job_id)
    log_path = job.layout.supervisor_log
    env = {**os.environ, "MULTIWORKER_HOME": str(store.home)}
    with open_private(log_path) as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "multiworker.backends.daemon", job_id],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            close_fds=True,
        )
    store.update_job(job_id, supervisor_pid=proc.pid, heartbeat_at=time.time())
    deadline = time.monotonic() + wait_running
    while (time.monotonic() < deadline and store.get_job(job_id).state == JobState.PENDING
           and proc.poll() is None):
        time.sleep(0.05)
    return proc.pid


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    store = Store()
    job = store.get_job(argv[0])
    state = get_backend(job.backend).run(store, job.id)
    return JobState(state).exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
