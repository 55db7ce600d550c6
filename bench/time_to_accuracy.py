"""Time to 99% test accuracy: `make demo`'s job (examples/mnist, 2 workers, its defaults) against
the tutorials' recipe hand-launched (their CNN, SGD 0.01, batch 64 per worker, 2 workers, 3 epochs).

Interleaved pairs (baseline first) in one run; prints one JSON object with every run (wall time
start-up included, test accuracy, CPU seconds, load average before/after) and the medians.
Usage: python bench/time_to_accuracy.py [--pairs 3] [--target 0.99] [-- extra demo trainer args]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from _runs import TUTORIAL, run_baseline, run_multiworker, split_args


def main(argv: list[str]) -> int:
    argv, extra = split_args(argv)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--target", type=float, default=0.99)
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {"tutorial_hand_launched": [], "multiworker_demo": []}
    for r in range(args.pairs):
        runs["tutorial_hand_launched"].append(run_baseline(TUTORIAL))
        runs["multiworker_demo"].append(run_multiworker(extra))
        print(f"pair {r + 1}: {json.dumps({k: v[-1] for k, v in runs.items()})}", file=sys.stderr, flush=True)
    ratios = [d["wall_seconds"] / b["wall_seconds"] for b, d in zip(*runs.values())]
    demo = runs["multiworker_demo"]
    result = {
        "command": "python bench/time_to_accuracy.py " + " ".join(sys.argv[1:]),
        "runs": runs,
        "median_wall_seconds": {k: statistics.median(r["wall_seconds"] for r in v) for k, v in runs.items()},
        "wall_ratios_demo_over_tutorial": [round(x, 3) for x in ratios],
        "median_wall_ratio": round(statistics.median(ratios), 3),
        "demo_runs_reaching_target": sum(r["test_accuracy"] >= args.target for r in demo),
        "demo_runs_within_half_and_on_target": sum(x <= 0.5 and d["test_accuracy"] >= args.target
                                                   for x, d in zip(ratios, demo)),
        "pairs": args.pairs,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
