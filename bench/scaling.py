"""Scaling on one machine: 2 workers x 1 thread (MultiWorkerMirroredStrategy)
against 1 process x 2 threads (default strategy), same global batch, same steps, both through
`multiworker run examples/mnist/job.yaml`.

Interleaved pairs (one process first) for each per-worker batch size asked for; prints one JSON
object with every run and, per batch size, the median images/s ratio (2 workers over 1 process)
two ways: over the whole of `fit` (first-step tracing included) and over the last epoch only
(steady state), plus the step-time difference per step: what MultiWorkerMirroredStrategy's
collectives and the second worker's own loop cost. ``--baseline "<trainer args>"`` adds, in each
round, a pair run with those trainer arguments (say ``--steps-per-execution 1``), so a change is
compared with its baseline side by side in one run. Usage:
python bench/scaling.py [--pairs 3] [--steps 150] [--epochs 2] [--per-worker-batch 64 256]
                        [--baseline="--steps-per-execution 1"]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys

from _runs import run_multiworker


def _ratios(one: list[dict], two: list[dict], key: str) -> list[float]:
    return [round(t[key] / o[key], 4) for o, t in zip(one, two) if o.get(key) and t.get(key)]


def _compare(batch: int, pairs: int, recipe: list[str], baseline: list[str] | None = None) -> dict:
    arms = {"": recipe, **({"baseline": [*recipe, *baseline]} if baseline else {})}
    results = {name: {"1_process_x_2_threads": [], "2_workers_x_1_thread": []} for name in arms}
    for r in range(pairs):
        for name, args in arms.items():
            runs = results[name]
            runs["1_process_x_2_threads"].append(
                run_multiworker([*args, "--batch-size", str(2 * batch)], workers=1, threads=2))
            runs["2_workers_x_1_thread"].append(
                run_multiworker([*args, "--batch-size", str(batch)], workers=2, threads=1))
            print(f"batch {batch} pair {r + 1} {name or 'as shipped'}: "
                  f"{json.dumps({k: v[-1] for k, v in runs.items()})}", file=sys.stderr, flush=True)
    summary = _summarise(batch, results[""])
    if baseline:
        summary["baseline"] = {"trainer_args": baseline, **_summarise(batch, results["baseline"])}
    return summary


def _summarise(batch: int, runs: dict[str, list[dict]]) -> dict:
    global_batch = 2 * batch
    one, two = runs.values()
    fit, last = _ratios(one, two, "images_per_sec"), _ratios(one, two, "last_epoch_images_per_sec")
    step_ms = {k: round(statistics.median(1000 * global_batch / r["last_epoch_images_per_sec"] for r in v), 1)
               for k, v in runs.items()}
    return {
        "per_worker_batch": batch,
        "global_batch": global_batch,
        "runs": runs,
        "median_last_epoch_images_per_sec": {k: statistics.median(r["last_epoch_images_per_sec"] for r in v)
                                             for k, v in runs.items()},
        "last_epoch_step_ms": step_ms,
        "fit_ratios": fit,
        "last_epoch_ratios": last,
        "median_fit_ratio_2w_over_1p": statistics.median(fit),
        "median_last_epoch_ratio_2w_over_1p": statistics.median(last),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--steps", type=int, default=150, help="steps per epoch")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--per-worker-batch", type=int, nargs="+", default=[64])
    parser.add_argument("--baseline", default=None, help="trainer arguments of a baseline arm, in quotes")
    args = parser.parse_args(argv)
    baseline = shlex.split(args.baseline) if args.baseline else None
    recipe = ["--schedule", "onecycle", "--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps)]
    result = {
        "command": "python bench/scaling.py " + " ".join(sys.argv[1:]),
        "pairs": args.pairs,
        "by_batch": [_compare(b, args.pairs, recipe, baseline) for b in args.per_worker_batch],
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
