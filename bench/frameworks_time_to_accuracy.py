"""Time to 99% MNIST test accuracy for the same CNN and schedule in three frameworks, 2 processes each:
`multiworker run` of examples/mnist (TensorFlow, MultiWorkerMirroredStrategy, the demo),
examples/mnist_keras_jax (Keras 3 on JAX, DataParallel) and examples/mnist_torch (PyTorch DDP, gloo).

Rounds alternate the three (TensorFlow first) on the same machine; each run is a fresh
MULTIWORKER_HOME and its wall time includes start-up. Prints one JSON object with every run and the
medians. Frameworks whose packages are missing are left out and named.
Usage: python bench/frameworks_time_to_accuracy.py [--rounds 2] [--target 0.99] [--only jax,torch]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from _runs import REPO, _timed

EXAMPLES = {"tensorflow": ("mnist", "tensorflow"), "jax": ("mnist_keras_jax", "jax"), "torch": ("mnist_torch", "torch")}


def run(example: str) -> dict:
    home = tempfile.mkdtemp(prefix="mw-bench-")
    env = {**os.environ, "MULTIWORKER_HOME": home, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "multiworker", "run", str(REPO / "examples" / example / "job.yaml"), "-q"]
    result, _ = _timed(cmd, env=env, timeout=1800)
    job_dir = next(Path(home, "jobs").glob("*"))
    report = json.loads((job_dir / "output" / "metrics.json").read_text())
    return {**result, "test_accuracy": round(report["test_accuracy"], 4), "train_seconds": report["train_seconds"],
            "restarts": len(list(job_dir.glob("attempt_*"))) - 1}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--target", type=float, default=0.99)
    parser.add_argument("--only", default="tensorflow,jax,torch")
    args = parser.parse_args(argv)
    wanted = args.only.split(",")
    missing = [f for f in wanted if importlib.util.find_spec(EXAMPLES[f][1]) is None]
    names = [f for f in wanted if f not in missing]
    runs: dict[str, list[dict]] = {f: [] for f in names}
    for r in range(args.rounds):
        for f in names:
            runs[f].append(run(EXAMPLES[f][0]))
            print(f"round {r + 1} {f}: {json.dumps(runs[f][-1])}", file=sys.stderr, flush=True)
    result = {
        "command": "python bench/frameworks_time_to_accuracy.py " + " ".join(argv),
        "runs": runs,
        "median_wall_seconds": {f: statistics.median(x["wall_seconds"] for x in v) for f, v in runs.items()},
        "wall_seconds_range": {f: [min(x["wall_seconds"] for x in v), max(x["wall_seconds"] for x in v)]
                               for f, v in runs.items()},
        "test_accuracy_range": {f: [min(x["test_accuracy"] for x in v), max(x["test_accuracy"] for x in v)]
                                for f, v in runs.items()},
        "runs_reaching_target": {f: sum(x["test_accuracy"] >= args.target for x in v) for f, v in runs.items()},
        "left_out_not_installed": missing,
        "rounds": args.rounds,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
