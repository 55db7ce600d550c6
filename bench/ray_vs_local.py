"""MNIST, 2 workers, the same recipe: the Ray backend across two hosts (two network namespaces on
this machine, cluster already up) against the local backend, in one run. Not a test.

    sudo .venv/bin/python bench/ray_vs_local.py --epochs 2 --steps-per-epoch 60 --pairs 1

Prints one JSON object: images/s of each (from each run's metrics.json) and their ratio, and the
start-up of each (launcher start to the first training step, ``fit_start_unix``) and the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from ray_netns import RAY_ENV, TwoHostRay, unavailable_reason  # noqa: E402


def _run(prefix: list[str], extra: list[str], recipe: list[str]) -> dict:
    home = tempfile.mkdtemp(prefix="mwbench-")
    env = {**os.environ, **RAY_ENV, "MULTIWORKER_HOME": home,
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    started = time.time()
    subprocess.run([*prefix, sys.executable, "-m", "multiworker", "run", str(REPO / "examples/mnist/job.yaml"),
                    "-q", *extra, "--", *recipe], check=True, env=env, capture_output=True)
    metrics = json.loads(next(Path(home, "jobs").glob("*/output/metrics.json")).read_text())
    shutil.rmtree(home, ignore_errors=True)
    return {"images_per_sec": metrics["images_per_sec"], "startup_s": round(metrics["fit_start_unix"] - started, 2),
            "wall_s": round(time.time() - started, 1)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--steps-per-epoch", type=int, default=60)
    p.add_argument("--pairs", type=int, default=1, help="local/ray pairs, alternating")
    args = p.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"cannot build the two-host cluster: {reason}", file=sys.stderr)
        return 2
    recipe = ["--epochs", str(args.epochs), "--steps-per-epoch", str(args.steps_per_epoch)]
    cluster = TwoHostRay()
    try:
        cluster.start()
        ray_flags = ["--backend", "ray", "--ray-address", cluster.address, "--set", "placement=strict_spread"]
        runs = []
        for _ in range(args.pairs):
            local = _run([], [], recipe)
            ray = _run(cluster.exec_in(cluster.head_ns), ray_flags, recipe)
            runs.append({"local": local, "ray": ray,
                         "images_per_sec_ratio": round(ray["images_per_sec"] / local["images_per_sec"], 3),
                         "extra_startup_s": round(ray["startup_s"] - local["startup_s"], 2)})
    finally:
        cluster.stop()
    print(json.dumps({"recipe": recipe, "runs": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
