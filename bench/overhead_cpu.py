"""multiworker's CPU cost per trained image against the hand-launched script.

Same recipe on both sides (the tutorials' CNN, Adam with the one-cycle schedule, batch 64 per
worker), same workers and thread budget, same number of steps. CPU seconds are user + system of
every process each side ran (launcher and replicas, getrusage(RUSAGE_CHILDREN)): what this shared
machine resolves where images/s does not. Interleaved pairs (baseline first); prints one JSON
object with every run (wall, images/s, load average before/after) and the median ratio.
With ``--same-allocator`` both sides use the same CPU allocator (the hand launch gets
TF_CPU_ALLOCATOR_USE_BFC=1 as multiworker's replicas do), which isolates what the launcher, the
trainer library and its callbacks cost; without it the comparison includes that lever.
Usage: python bench/overhead_cpu.py [--pairs 3] [--steps 150] [--threads 1] [--same-allocator] [--mw-arg ARG ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

from _runs import run_baseline, run_multiworker

#: Adam + one-cycle on both sides: baseline_mwms.py's default, examples/mnist's --schedule onecycle.
COMMON = ["--learning-rate", "3e-3", "--batch-size", "64"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150, help="steps per epoch (one epoch)")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="intra/inter-op threads per replica, both sides")
    parser.add_argument("--same-allocator", action="store_true",
                        help="give the hand launch TF_CPU_ALLOCATOR_USE_BFC=1 too")
    parser.add_argument("--mw-arg", action="append", default=[],
                        help="extra trainer argument for the multiworker side only, e.g. --mw-arg=--backup-every=epoch")
    args = parser.parse_args(argv)
    recipe = [*COMMON, "--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps)]
    runs: dict[str, list[dict]] = {"hand_launched": [], "multiworker": []}
    for r in range(args.pairs):
        runs["hand_launched"].append(run_baseline([*recipe, "--optimizer", "onecycle"], args.workers, args.threads,
                                                         env={"TF_CPU_ALLOCATOR_USE_BFC": "1"} if args.same_allocator else None))
        runs["multiworker"].append(run_multiworker([*recipe, "--schedule", "onecycle", *args.mw_arg],
                                                   args.workers, threads=args.threads))
        print(f"pair {r + 1}: {json.dumps({k: v[-1] for k, v in runs.items()})}", file=sys.stderr, flush=True)
    ratios = [m["cpu_ms_per_image"] / b["cpu_ms_per_image"] for b, m in zip(*runs.values())]
    keys = ("cpu_ms_per_image", "cpu_seconds", "wall_seconds", "images_per_sec", "startup_seconds")
    result = {
        "command": "python bench/overhead_cpu.py " + " ".join(sys.argv[1:]),
        "runs": runs,
        "median": {k: {key: statistics.median(r[key] for r in v) for key in keys} for k, v in runs.items()},
        "cpu_per_image_ratios": [round(x, 4) for x in ratios],
        "median_cpu_per_image_ratio": round(statistics.median(ratios), 4),
        "pairs": args.pairs,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
