"""TensorFlow's pooling CPU allocator (TF_CPU_ALLOCATOR_USE_BFC=1, what multiworker now sets in every
replica's environment) against the default malloc-backed one, on `make demo`'s job.

Both sides are `multiworker run examples/mnist/job.yaml` (2 workers x 1 thread, one epoch of the
one-cycle recipe); the baseline sets `--set env.TF_CPU_ALLOCATOR_USE_BFC=0` (a spec's env wins).
Interleaved pairs (baseline first); prints one JSON object with every run (wall, CPU seconds,
images/s, test accuracy, load average before/after) and the median ratios.
Usage: python bench/allocator.py [--pairs 3] [--epochs 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from _runs import run_multiworker


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=1)
    args = parser.parse_args(argv)
    recipe = ["--schedule", "onecycle", "--epochs", str(args.epochs)]
    runs: dict[str, list[dict]] = {"malloc_allocator": [], "bfc_allocator": []}
    for r in range(args.pairs):
        runs["malloc_allocator"].append(run_multiworker(recipe, extra=["--set", "env.TF_CPU_ALLOCATOR_USE_BFC=0"]))
        runs["bfc_allocator"].append(run_multiworker(recipe))
        print(f"pair {r + 1}: {json.dumps({k: v[-1] for k, v in runs.items()})}", file=sys.stderr, flush=True)
    keys = ("images_per_sec", "cpu_ms_per_image", "wall_seconds", "test_accuracy")
    result = {
        "command": "python bench/allocator.py " + " ".join(sys.argv[1:]),
        "runs": runs,
        "median": {k: {key: statistics.median(r[key] for r in v) for key in keys} for k, v in runs.items()},
        "images_per_sec_ratios": [round(b["images_per_sec"] / m["images_per_sec"], 3) for m, b in zip(*runs.values())],
        "cpu_per_image_ratios": [round(b["cpu_ms_per_image"] / m["cpu_ms_per_image"], 3) for m, b in zip(*runs.values())],
        "pairs": args.pairs,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
