"""Hang detection and preemption on the MNIST example (2 workers), from the job's own events.

Hang: worker-1 is frozen (``--inject-failure worker-1@epoch:1:STOP``) with ``run_policy.hang_timeout``
set; reported: the hang timeout, the time from the last output of any replica to the ``Hung`` event
(the quiet the event measured), and from ``Hung`` to training again (the ``Resumed`` event: the next
attempt's first step report).

Preemption: ``PREEMPT=<notice>`` of worker-1 (and of worker-0, the chief) inside epoch 2, for
``multiworker.trainer`` (examples/mnist) and for the tutorial's plain trainer with
``BackupAndRestore(save_freq=N)`` (tests/integration/tutorial); reported from the ``Resumed`` event:
the step at the SIGTERM, the highest step reached in the preempted attempt, the step resumed from,
the steps lost (at the SIGTERM minus resumed) and redone (reached minus resumed).

Usage: python bench/hangs_preemption.py [--rounds 1] [--hang-timeout 20] [--notices 10 30]
                                        [--save-freq 50] [--only hang|preempt] [--mw-at epoch:1 step:30]
                                        [--skip-tutorial]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MNIST = REPO / "examples" / "mnist" / "job.yaml"
TUTORIAL = REPO / "tests" / "integration" / "tutorial" / "job.yaml"
sys.path.insert(0, str(REPO / "src"))

from multiworker.job import Store  # noqa: E402

_RESUMED = re.compile(r"training again ([\d.]+)s after .*?: step (\d+) at the interruption, (\d+) reached in that "
                      r"attempt; resumed from step (\d+): (\d+) steps lost")


def _run(spec: Path, *args: str) -> tuple[Store, str, float]:
    home = tempfile.mkdtemp(prefix="mw-bench-hang-")
    env = {**os.environ, "MULTIWORKER_HOME": home, "PYTHONPATH": str(REPO / "src")}
    start = time.time()
    proc = subprocess.run([sys.executable, "-m", "multiworker", "run", str(spec), "-q", *args], env=env,
                          capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise RuntimeError(f"run failed ({proc.returncode}): {proc.stdout[-3000:]}")
    store = Store(Path(home))
    return store, store.list_jobs()[0].id, time.time() - start


def _event(store: Store, job_id: str, reason: str) -> dict:
    (event,) = [e for e in store.events(job_id) if e["reason"] == reason]
    return event


def hang(timeout: float) -> dict:
    store, job_id, wall = _run(MNIST, "--set", f"run_policy.hang_timeout={timeout:g}s", "--set", "run_policy.backoff=1s",
                               "--inject-failure", "worker-1@epoch:1:STOP", "--", "--epochs", "2", "--steps-per-epoch", "60")
    hung, resumed = _event(store, job_id, "Hung"), _event(store, job_id, "Resumed")
    quiet = float(re.search(r"advanced for ([\d.]+)s", hung["message"]).group(1))
    again = float(_RESUMED.search(resumed["message"]).group(1))
    return {"case": "hang", "hang_timeout": timeout, "last_progress_to_hung_s": quiet,
            "hung_to_training_s": round(resumed["ts"] - hung["ts"], 2), "resumed_message_s": again,
            "laggard": hung["replica"], "wall_s": round(wall, 1)}


def preempt(trainer: str, replica: str, notice: float, save_freq: int, at: str) -> dict:
    inject = f"{replica}@{at}:PREEMPT={notice:g}s"
    if trainer == "multiworker.trainer":  # at epoch:1 (an epoch's end) or mid-epoch (step:30 of 200)
        store, job_id, wall = _run(MNIST, "--set", "run_policy.backoff=1s", "--inject-failure", inject, "--",
                                   "--epochs", "2" if at.startswith("epoch") else "1", "--steps-per-epoch",
                                   "60" if at.startswith("epoch") else "200")
    else:  # steps enough that the notice ends before training does (a step takes at least 0.05 s)
        steps = 60 + int(notice / 0.05) + 4 * save_freq
        backup = tempfile.mkdtemp(prefix="mw-bench-backup-")
        store, job_id, wall = _run(TUTORIAL, "--inject-failure", inject, "--", "--steps", str(steps), "--save-freq",
                                   str(save_freq), "--step-seconds", "0.05", "--backup-dir", f"{backup}/backup")
    _, at_signal, reached, resumed, lost = _RESUMED.search(_event(store, job_id, "Resumed")["message"]).groups()
    return {"case": "preempt", "trainer": trainer, "replica": replica, "at": at, "notice_s": notice,
            "save_freq": save_freq if trainer != "multiworker.trainer" else None, "step_at_sigterm": int(at_signal),
            "reached": int(reached), "resumed_from": int(resumed), "steps_lost": int(lost),
            "redone": int(reached) - int(resumed), "wall_s": round(wall, 1)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--hang-timeout", type=float, default=20.0)
    parser.add_argument("--notices", type=float, nargs="+", default=[10.0, 30.0])
    parser.add_argument("--save-freq", type=int, default=50)
    parser.add_argument("--only", choices=["hang", "preempt"])
    parser.add_argument("--mw-at", nargs="+", default=["epoch:1", "step:30"],
                        help="when multiworker.trainer replicas are preempted: epoch:1 (inside epoch 2 on any "
                        "machine) and step:30 (mid-epoch here; a progress line comes every 2 s)")
    parser.add_argument("--skip-tutorial", action="store_true")
    args = parser.parse_args(argv)
    for _ in range(args.rounds):
        cases = []
        if args.only != "preempt":
            cases.append(lambda: hang(args.hang_timeout))
        if args.only != "hang":
            for notice in args.notices:
                for replica in ("worker-1", "worker-0"):
                    cases += [lambda n=notice, r=replica, at=at: preempt("multiworker.trainer", r, n, args.save_freq, at)
                              for at in args.mw_at]
                if not args.skip_tutorial:
                    cases.append(lambda n=notice: preempt("tutorial BackupAndRestore", "worker-1", n, args.save_freq,
                                                          "step:60"))
        for case in cases:
            print(json.dumps({**case(), "load": round(os.getloadavg()[0], 2)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
