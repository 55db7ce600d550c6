"""One timed run of each side, shared by the benchmarks: the hand-launched tf-keras baseline
(bench/mnist_launch_baseline.py) and `multiworker run examples/mnist/job.yaml`.

Each result has wall seconds, CPU seconds (user + system of the command and every process it
waited for: launcher and replicas, from getrusage(RUSAGE_CHILDREN)), the load average before and
after, and worker 0's report (test accuracy, images/s, trained images).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
JOB = REPO / "examples" / "mnist" / "job.yaml"

#: The tutorials' recipe (their CNN, SGD 0.01, batch 64 per worker, 3 epochs).
TUTORIAL = ["--optimizer", "sgd", "--learning-rate", "0.01", "--epochs", "3", "--batch-size", "64"]


def split_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the benchmark's own arguments, the trainer arguments after ``--``)."""
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _timed(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> tuple[dict, str]:
    load_before = os.getloadavg()[0]
    cpu0, start = _cpu(), time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    wall, cpu = time.time() - start, _cpu() - cpu0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    return {"start_unix": start, "wall_seconds": round(wall, 2), "cpu_seconds": round(cpu, 2),
            "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)}, proc.stdout


def _images(report: dict) -> int:
    return int(report["global_batch_size"] * report["steps_per_epoch"] * report.get("epochs_run", report["epochs"]))


def run_baseline(trainer_args: list[str], workers: int = 2, threads: int | None = None,
                 env: dict[str, str] | None = None) -> dict:
    """Hand launch of bench/baseline_mwms.py workers (TF_CONFIG set by hand, no supervision);
    ``env`` is added to the workers' environment."""
    cmd = [sys.executable, str(REPO / "bench" / "mnist_launch_baseline.py"), "-n", str(workers)]
    cmd += ["--threads", str(threads)] if threads else []
    result, out = _timed([*cmd, "--", *trainer_args], env={**os.environ, **(env or {})})
    report = json.loads([ln for ln in out.splitlines() if ln.startswith("{")][-1])
    return _summary(result, report)


def run_multiworker(trainer_args: list[str], workers: int = 2, extra: list[str] = (),
                    threads: int | None = None) -> dict:
    """`multiworker run examples/mnist/job.yaml` in a fresh MULTIWORKER_HOME."""
    home = tempfile.mkdtemp(prefix="mw-bench-")
    env = {**os.environ, "MULTIWORKER_HOME": home, "PYTHONPATH": str(REPO / "src")}
    if threads:
        env["MULTIWORKER_THREADS"] = str(threads)
    cmd = [sys.executable, "-m", "multiworker", "run", str(JOB), "-q",
           "--set", f"pools.worker.replicas={workers}", *extra, "--", *trainer_args]
    result, _ = _timed(cmd, env=env)
    job_dir = next(Path(home, "jobs").glob("*"))
    report = json.loads((job_dir / "output" / "metrics.json").read_text())
    summary = _summary(result, report)
    summary["home"] = home
    summary["restarts"] = len(list(job_dir.glob("attempt_*"))) - 1
    epochs = _epoch_lines(max(job_dir.glob("attempt_*")) / "worker-0.log")
    if epochs:  # the last epoch's rate: no start-up, no first-step tracing
        summary["last_epoch_images_per_sec"] = epochs[-1].get("images_per_sec")
    return summary


def _epoch_lines(log: Path) -> list[dict]:
    from multiworker.metrics_line import parse_metric

    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return [m for m in map(parse_metric, lines) if m and m["kind"] == "epoch"]


def _summary(result: dict, report: dict) -> dict:
    images = _images(report)
    return {**result, "test_accuracy": report["test_accuracy"], "images_per_sec": report["images_per_sec"],
            "train_seconds": report["train_seconds"], "startup_seconds": round(report["fit_start_unix"] - result["start_unix"], 2),
            "trained_images": images, "cpu_ms_per_image": round(1000 * result["cpu_seconds"] / images, 4)}
