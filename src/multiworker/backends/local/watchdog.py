"""A watchdog that outlives the local driver by a moment: when it dies (even by
SIGKILL), it kills every process still carrying the job's MULTIWORKER_JOB_ID, grandchildren
included (PR_SET_PDEATHSIG only reaches a replica's direct process).

``python -m multiworker.backends.local.watchdog SUPERVISOR_PID JOB_ID``
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from multiworker.procs import pid_alive, processes_of_job

__all__ = ["start_watchdog"]


def start_watchdog(job_id: str) -> subprocess.Popen:
    """Start the watchdog for this (supervisor) process."""
    env = {k: v for k, v in os.environ.items() if k != "MULTIWORKER_JOB_ID"}
    return subprocess.Popen(
        [sys.executable, "-m", "multiworker.backends.local.watchdog", str(os.getpid()), job_id],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, env=env, close_fds=True,
    )


def main(argv: list[str]) -> int:
    supervisor, job_id = int(argv[0]), argv[1]
    while pid_alive(supervisor):
        time.sleep(0.5)
    for _ in range(3):  # a few passes: a dying group may still be forking
        pids = processes_of_job(job_id)
        if not pids:
            break
        for pid in pids:
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
