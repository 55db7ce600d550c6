"""Hand-launch N bench/baseline_mwms.py workers on localhost, each with its own TF_CONFIG.

This is what one would do without multiworker: pick free ports, start the processes, wait.
Prints one JSON object: worker 0's report plus the launcher's own wall time. Arguments after
`--` go to every worker, e.g. `python bench/mnist_launch_baseline.py -n 2 -- --epochs 1`.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def free_ports(n):
    """Ports the OS hands out now; held open together so they differ."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("-n", "--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=None,
                   help="intra/inter-op threads per worker (default: cores // workers, at least 1)")
    p.add_argument("--timeout", type=float, default=1800)
    args = p.parse_args(argv)
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.workers)
    ports = free_ports(args.workers)
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    start = time.time()
    procs = []
    for index in range(args.workers):
        env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
                   TF_NUM_INTRAOP_THREADS=str(threads), TF_NUM_INTEROP_THREADS=str(threads),
                   OMP_NUM_THREADS=str(threads),
                   TF_CONFIG=json.dumps({"cluster": cluster,
                                         "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen([sys.executable, str(HERE / "baseline_mwms.py"), *extra],
                                      env=env, stdout=subprocess.PIPE, text=True,
                                      start_new_session=True))
    reports, codes = [], []
    try:
        for proc in procs:
            out, _ = proc.communicate(timeout=args.timeout)
            codes.append(proc.returncode)
            lines = [ln for ln in out.splitlines() if ln.startswith("{")]
            reports.append(json.loads(lines[-1]) if lines else None)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    result = dict(reports[0] or {}, launcher_wall_seconds=round(time.time() - start, 3),
                  threads_per_worker=threads, exit_codes=codes)
    print(json.dumps(result), flush=True)
    return 0 if all(c == 0 for c in codes) else 1


if __name__ == "__main__":
    sys.exit(main())
