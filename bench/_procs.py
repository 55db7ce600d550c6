"""Start one copy of a benchmark script per worker on a shared random port, wait, print their
JSON lines (shared by step_probe.py and allreduce_floor.py)."""

from __future__ import annotations

import os
import random
import subprocess
import sys


def launch_workers(script: str, argv: list[str], workers: int) -> int:
    """Run ``script argv --index i --port P`` for each worker; 0 when every one succeeded.
    Their stderr is dropped unless PROBE_STDERR is set."""
    port = random.randint(20000, 40000)
    stderr = None if os.environ.get("PROBE_STDERR") else subprocess.DEVNULL
    procs = [subprocess.Popen([sys.executable, script, *argv, "--index", str(i), "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=stderr, text=True)
             for i in range(workers)]
    outs = [p.communicate()[0] for p in procs]
    if any(p.returncode for p in procs):
        print("a worker process failed (PROBE_STDERR=1 shows why)", file=sys.stderr)
        return 1
    print("\n".join(out.strip() for out in outs))
    return 0
