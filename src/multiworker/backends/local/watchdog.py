"""A watchdog that outlives the local driver by a moment: when it dies (even by
SIGKILL), it kills every process still carrying the job's MULTIWORKER_JOB_ID, grandchildren
included (PR_SET_PDEATHSIG only reaches a replica's direct process), and deletes the job's
network namespace.

``python -m multiworker.backends.local.watchdog SUPERVISOR_PID JOB_ID``
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from multiworker.netns import remove_job_network
from multiworker.procs import job_processes, pid_alive, signal_group, start_ticks

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
    ticks = start_ticks(supervisor)
    while pid_alive(supervisor) and start_ticks(supervisor) == ticks:
        time.sleep(0.5)
    for _ in range(3):  # a few passes: a dying group may still be forking
        found = job_processes(job_id)
        if not found:
            break
        for pid, ticks in found.items():
            signal_group(pid, signal.SIGKILL, ticks)
        time.sleep(0.2)
    remove_job_network(job_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
