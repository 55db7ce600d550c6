"""Recovery cost: `multiworker run examples/mnist/job.yaml` clean, then with one SIGKILL of worker-1
at 30% and at 70% of the clean run's training (--inject-failure, seconds after the first attempt
started = clean start-up + fraction x clean training time).

``--kill worker-0`` kills the chief instead (it cannot back up the step it reached, so the restart
resumes from the last periodic backup).

A second clean run comes after the killed ones, and the extra wall of a killed run is measured
against the mean of the two clean runs (the clean runs alone vary by several percent between runs
here, as much as a restart costs); ``--no-clean-after`` compares with the first one only.

``--backoff`` sets the group's first restart delay (``run_policy.backoff``; default 0.5s, as in every
earlier measurement); several values run the kills once for each, in the same round.

Reports each run's wall, the extra wall over the clean runs as a fraction of them (target <= 0.15),
test accuracy, restarts, load average before/after, and the backups' own cost on the clean run
(StepBackup's logged seconds spent saving over training seconds, target <= 2%).
Usage: python bench/recovery.py [--backup-every auto] [--at 0.3 0.7] [--kill worker-1] [--backoff 0.5s ...]
                                [--no-clean-after] [-- trainer args]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from _runs import run_multiworker, split_args

COST = re.compile(r"backups: (\d+) taken, ([\d.]+) s saving = ([\d.]+)% of ([\d.]+) s of training")


def backup_cost(home: str) -> dict | None:
    """The chief's last ``backups: ...`` log line of the final attempt."""
    logs = sorted(Path(home, "jobs").glob("*/attempt_*/worker-0.log"))
    found = COST.findall(logs[-1].read_text()) if logs else []
    if not found:
        return None
    n, seconds, percent, train = found[-1]
    return {"backups": int(n), "save_seconds": float(seconds), "percent_of_training": float(percent),
            "training_seconds": float(train)}


def main(argv: list[str]) -> int:
    argv, extra = split_args(argv)
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--backup-every", default="auto")
    parser.add_argument("--at", type=float, nargs="+", default=[0.3, 0.7])
    parser.add_argument("--kill", default="worker-1", help="the replica to SIGKILL (default: worker-1)")
    parser.add_argument("--backoff", nargs="+", default=["0.5s"],
                        help="first restart delay(s) of the killed runs (default: 0.5s)")
    parser.add_argument("--no-clean-after", dest="clean_after", action="store_false",
                        help="skip the second clean run; compare with the first one only")
    args = parser.parse_args(argv)
    trainer_args = [*extra, "--backup-every", args.backup_every]
    clean = run_multiworker(trainer_args)
    clean["backup_cost"] = backup_cost(clean["home"])
    print(f"clean: {json.dumps(clean)}", file=sys.stderr, flush=True)
    killed = []
    for backoff in args.backoff:
        for fraction in args.at:
            at = clean["startup_seconds"] + fraction * clean["train_seconds"]
            run = run_multiworker(trainer_args, extra=["--inject-failure", f"{args.kill}@{at:.1f}s:KILL",
                                                       "--set", f"run_policy.backoff={backoff}"])
            run.update(kill_fraction=fraction, kill_at_seconds=round(at, 1), backoff=backoff)
            killed.append(run)
            print(f"kill at {fraction:.0%}, backoff {backoff}: {json.dumps(run)}", file=sys.stderr, flush=True)
    cleans = [clean]
    if args.clean_after:
        cleans.append(run_multiworker(trainer_args))
        cleans[-1]["backup_cost"] = backup_cost(cleans[-1]["home"])
        print(f"clean after: {json.dumps(cleans[-1])}", file=sys.stderr, flush=True)
    reference = sum(c["wall_seconds"] for c in cleans) / len(cleans)
    for run in killed:
        run["extra_wall_fraction"] = round((run["wall_seconds"] - reference) / reference, 3)
    print(json.dumps({"command": "python bench/recovery.py " + " ".join(sys.argv[1:]),
                      "clean": clean, "clean_after": cleans[1] if len(cleans) > 1 else None,
                      "clean_reference_seconds": round(reference, 2), "killed": killed}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
