"""Scaling on one machine (issue 13, item 4): 2 workers x 1 thread (MultiWorkerMirroredStrategy)
against 1 process x 2 threads (default strategy), same global batch (128), same steps, both
through `multiworker run examples/mnist/job.yaml`.

Interleaved pairs (one process first); prints one JSON object with every run and the median
images/s ratio (2 workers over 1 process), plus the step-time difference: what the collective
all-reduce and its waits cost per step. Usage: python bench/scaling.py [--pairs 3] [--steps 150]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from _runs import run_multiworker

GLOBAL_BATCH = 128


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args(argv)
    recipe = ["--schedule", "onecycle", "--epochs", "1", "--steps-per-epoch", str(args.steps)]
    runs: dict[str, list[dict]] = {"1_process_x_2_threads": [], "2_workers_x_1_thread": []}
    for r in range(args.pairs):
        runs["1_process_x_2_threads"].append(
            run_multiworker([*recipe, "--batch-size", str(GLOBAL_BATCH)], workers=1, threads=2))
        runs["2_workers_x_1_thread"].append(
            run_multiworker([*recipe, "--batch-size", str(GLOBAL_BATCH // 2)], workers=2, threads=1))
        print(f"pair {r + 1}: {json.dumps({k: v[-1] for k, v in runs.items()})}", file=sys.stderr, flush=True)
    one, two = runs.values()
    ratios = [t["images_per_sec"] / o["images_per_sec"] for o, t in zip(one, two)]
    step_ms = {k: [1000 * GLOBAL_BATCH / r["images_per_sec"] for r in v] for k, v in runs.items()}
    result = {
        "command": "python bench/scaling.py " + " ".join(sys.argv[1:]),
        "runs": runs,
        "median_images_per_sec": {k: statistics.median(r["images_per_sec"] for r in v) for k, v in runs.items()},
        "median_step_ms": {k: round(statistics.median(v), 1) for k, v in step_ms.items()},
        "images_per_sec_ratios": [round(x, 4) for x in ratios],
        "median_ratio_2w_over_1p": round(statistics.median(ratios), 4),
        "pairs": args.pairs,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
