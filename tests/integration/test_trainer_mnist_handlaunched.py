"""examples/mnist on real replica processes launched by hand, each with its own TF_CONFIG.

No launcher involved: this checks the trainer library against the environment contract alone
(MultiWorkerMirroredStrategy, a kill and resume from BackupAndRestore, and parameter servers
plus an evaluator added by configuration only).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from multiworker.metrics_line import parse_metric
from multiworker.procs import free_ports

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mnist"
TINY = ["--steps-per-epoch", "5", "--batch-size", "32"]


class HandLaunched:
    """One attempt of a job: a process per replica, logs in ``<out>/<attempt>/<type>-<index>.log``."""

    def __init__(self, out: Path, pools: dict[str, int], args: list[str], *, attempt: int = 0):
        self.out, self.attempt = out, attempt
        in_cluster = [(t, i) for t in ("chief", "worker", "ps") for i in range(pools.get(t, 0))]
        cluster: dict[str, list[str]] = {}
        for (task_type, _), port in zip(in_cluster, free_ports(len(in_cluster))):
            cluster.setdefault(task_type, []).append(f"127.0.0.1:{port}")
        roles = in_cluster + [("evaluator", i) for i in range(pools.get("evaluator", 0))]
        logs = out / f"attempt_{attempt}"
        logs.mkdir(parents=True, exist_ok=True)
        self.procs: dict[str, subprocess.Popen] = {}
        self.logs: dict[str, Path] = {}
        for task_type, index in roles:
            name = f"{task_type}-{index}"
            task = {"type": task_type, "index": index}
            env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2",
                       MULTIWORKER_THREADS="1", MULTIWORKER_OUTPUT_DIR=str(out),
                       MULTIWORKER_JOB_ID=f"handlaunched-{out.name}", MULTIWORKER_ATTEMPT=str(attempt),
                       TF_CONFIG=json.dumps({"cluster": cluster, "task": task, "environment": "cloud"}))
            self.logs[name] = logs / f"{name}.log"
            with open(self.logs[name], "w") as log:
                self.procs[name] = subprocess.Popen(
                    [sys.executable, "-m", "trainer.task", *args], cwd=EXAMPLE, env=env,
                    stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def metrics(self, name: str, kind: str | None = None) -> list[dict]:
        lines = (parse_metric(line) for line in self.logs[name].read_text().splitlines())
        return [m for m in lines if m and (kind is None or m["kind"] == kind)]

    def wait(self, timeout: float = 300) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        try:
            for proc in self.procs.values():
                proc.wait(timeout=max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"replicas still running after {timeout:.0f} s\n{self.tails()}")
        return {name: proc.returncode for name, proc in self.procs.items()}

    def wait_for(self, name: str, predicate, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not predicate(self):
            if time.monotonic() > deadline or self.procs[name].poll() is not None:
                self.kill()
                pytest.fail(f"{name}: condition not reached\n{self.tails()}")
            time.sleep(0.05)

    def kill(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def tails(self, lines: int = 25) -> str:
        return "\n".join(f"--- {name}\n" + "\n".join(path.read_text().splitlines()[-lines:])
                         for name, path in self.logs.items())


@pytest.fixture
def launched():
    started: list[HandLaunched] = []

    def launch(*args, **kwargs) -> HandLaunched:
        started.append(HandLaunched(*args, **kwargs))
        return started[-1]

    yield launch
    for job in started:
        job.kill()


def test_two_workers_train_save_and_report(tmp_path, launched):
    import numpy as np
    import tf_keras as keras

    job = launched(tmp_path, {"worker": 2}, ["--epochs", "2", *TINY])
    codes = job.wait()
    assert codes == {"worker-0": 0, "worker-1": 0}, job.tails()

    # worker 0 is the chief: it alone reports; images/s uses the global batch (2 x 32)
    assert [m["epoch"] for m in job.metrics("worker-0", "epoch")] == [1, 2]
    assert all(m["images_per_sec"] > 0 and m["steps"] == 5 for m in job.metrics("worker-0", "epoch"))
    assert job.metrics("worker-1") == []
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["global_batch_size"] == 64 and metrics["workers"] == 2 and metrics["epochs_run"] == 2
    assert {"test_accuracy", "test_loss", "train_seconds", "images_per_sec", "wall_seconds"} <= set(metrics)
    assert job.metrics("worker-0", "final")[0]["test_accuracy"] == metrics["test_accuracy"]

    model = keras.models.load_model(tmp_path / "model")
    assert model.predict(np.zeros((3, 28, 28, 1), "float32"), verbose=0).shape == (3, 10)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("model")) == ["model"]
    assert (tmp_path / "TRAINING_DONE").exists()


def test_killed_group_resumes_from_backup(tmp_path, launched):
    epochs = 6
    args = ["--epochs", str(epochs), "--steps-per-epoch", "25", "--batch-size", "32"]
    first = launched(tmp_path, {"worker": 2}, args)
    first.wait_for("worker-0", lambda job: job.metrics("worker-0", "epoch"))
    first.kill()  # the whole group dies mid-training, as after a lost replica (usually in epoch 2)
    before = [m["epoch"] for m in first.metrics("worker-0", "epoch")]
    assert before == list(range(1, len(before) + 1)) and len(before) < epochs, before
    assert not (tmp_path / "metrics.json").exists()

    second = launched(tmp_path, {"worker": 2}, args, attempt=1)
    assert second.wait() == {"worker-0": 0, "worker-1": 0}, second.tails()
    resumed = [m["epoch"] for m in second.metrics("worker-0", "epoch")]
    # after the last epoch backed up: the last one reported, or the next when the kill fell between
    # that epoch's backup and its metric line; never from scratch, never skipping an epoch
    assert resumed and len(before) + 1 <= resumed[0] <= len(before) + 2, (before, resumed)
    assert resumed == list(range(resumed[0], epochs + 1)), (before, resumed)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["first_epoch"] == resumed[0] and metrics["attempt"] == 1


def test_parameter_servers_and_evaluator_by_configuration(tmp_path, launched):
    """The same trainer under ParameterServerStrategy, with an evaluator; everyone exits by itself."""
    job = launched(tmp_path, {"chief": 1, "worker": 1, "ps": 1, "evaluator": 1}, ["--epochs", "2", *TINY])
    codes = job.wait()
    assert codes == {"chief-0": 0, "worker-0": 0, "ps-0": 0, "evaluator-0": 0}, job.tails()

    assert [m["epoch"] for m in job.metrics("chief-0", "epoch")] == [1, 2]
    assert "chief-0: parameter_server strategy" in job.logs["chief-0"].read_text()
    assert json.loads((tmp_path / "metrics.json").read_text())["test_accuracy"] > 0
    assert (tmp_path / "model" / "saved_model.pb").exists()

    evals = job.metrics("evaluator-0", "eval")
    assert evals and evals[-1]["checkpoint"].endswith("ckpt-2") and evals[-1]["epoch"] == 2
    eval_json = json.loads((tmp_path / "eval_metrics.json").read_text())
    assert eval_json["checkpoint"] == evals[-1]["checkpoint"] and "accuracy" in eval_json
