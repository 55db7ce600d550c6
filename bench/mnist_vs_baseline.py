"""Side by side, in one run: `multiworker run examples/mnist/job.yaml` against the same MNIST
recipe hand-launched as plain tf-keras MultiWorkerMirroredStrategy processes (bench/baseline_mwms.py).

Alternates the two (baseline first) --rounds times and prints one JSON object: per run images/s,
wall time, start-up (command start to model.fit start on worker 0) and test accuracy, then the
medians and ratios. Usage: python bench/mnist_vs_baseline.py [--rounds 2] [-- trainer args]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _runs import split_args

REPO = Path(__file__).resolve().parents[1]


def run_baseline(workers: int, extra: list[str]) -> dict:
    start = time.time()
    out = subprocess.run([sys.executable, str(REPO / "bench" / "mnist_launch_baseline.py"), "-n", str(workers), "--", *extra],
                         capture_output=True, text=True, check=True).stdout
    report = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    return {"images_per_sec": report["images_per_sec"], "wall_seconds": round(time.time() - start, 2),
            "startup_seconds": round(report["fit_start_unix"] - start, 2), "test_accuracy": report["test_accuracy"]}


def run_multiworker(workers: int, extra: list[str]) -> dict:
    home = tempfile.mkdtemp(prefix="mw-bench-")
    env = {**os.environ, "MULTIWORKER_HOME": home}
    start = time.time()
    subprocess.run([sys.executable, "-m", "multiworker", "run", str(REPO / "examples" / "mnist" / "job.yaml"), "-q",
                    "--set", f"pools.worker.replicas={workers}", "--", *extra],
                   capture_output=True, text=True, check=True, env=env)
    wall = time.time() - start
    out_dir = next(Path(home, "jobs").glob("*/output"))
    metrics = json.loads((out_dir / "metrics.json").read_text())
    return {"images_per_sec": metrics["images_per_sec"], "wall_seconds": round(wall, 2),
            "startup_seconds": round(metrics["fit_start_unix"] - start, 2), "test_accuracy": metrics["test_accuracy"]}


def main(argv: list[str]) -> int:
    argv, extra = split_args(argv)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {"baseline": [], "multiworker": []}
    for r in range(args.rounds):
        runs["baseline"].append(run_baseline(args.workers, extra))
        runs["multiworker"].append(run_multiworker(args.workers, extra))
        print(f"round {r + 1}: {json.dumps({k: v[-1] for k, v in runs.items()})}", file=sys.stderr, flush=True)
    med = {name: {key: statistics.median(run[key] for run in rs) for key in rs[0]} for name, rs in runs.items()}
    result = {
        "command": "python bench/mnist_vs_baseline.py " + " ".join(sys.argv[1:]),
        "workers": args.workers,
        "trainer_args": extra,
        "runs": runs,
        "median": med,
        "throughput_ratio": round(med["multiworker"]["images_per_sec"] / med["baseline"]["images_per_sec"], 4),
        "wall_time_ratio": round(med["multiworker"]["wall_seconds"] / med["baseline"]["wall_seconds"], 4),
        "startup_difference_seconds": round(med["multiworker"]["startup_seconds"] - med["baseline"]["startup_seconds"], 2),
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
