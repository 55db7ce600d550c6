"""A watchdog that outlives the containers driver: when the driver dies (even by SIGKILL), it
removes every container and the network of the job (an attached ``run`` client dies with its parent,
but the container it started would run on).

``python -m multiworker.backends.containers.watchdog SUPERVISOR_PID JOB_ID ENGINE_PATH ENGINE_NAME``
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from multiworker.containers.engine import Engine
from multiworker.procs import pid_alive, start_ticks

__all__ = ["start_watchdog"]


def start_watchdog(job_id: str, engine: Engine) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "MULTIWORKER_JOB_ID"}
    return subprocess.Popen(
        [sys.executable, "-m", "multiworker.backends.containers.watchdog", str(os.getpid()), job_id,
         engine.path, engine.name],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True, env=env, close_fds=True,
    )


def main(argv: list[str]) -> int:
    supervisor, job_id, path, name = int(argv[0]), argv[1], argv[2], argv[3]
    ticks = start_ticks(supervisor)
    while pid_alive(supervisor) and start_ticks(supervisor) == ticks:
        time.sleep(0.5)
    Engine(name, path).remove_job(job_id)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
