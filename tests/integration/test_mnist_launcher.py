"""MNIST through `multiworker run`: real TensorFlow replicas talking over localhost."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import (
    REPO,
    assert_resumed,
    mw,
    mw_popen,
    no_processes_left,
    running_job,
    status,
    wait_for,
)

from multiworker.job import Store

pytestmark = pytest.mark.integration
JOB = str(REPO / "examples" / "mnist" / "job.yaml")


def test_two_workers_train_and_model_predicts(mw_home):
    proc = mw("run", JOB, "-q", "--", "--epochs", "1", "--steps-per-epoch", "30", home=mw_home)
    assert proc.returncode == 0, proc.stdout[-3000:]
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 0
    assert [r["state"] for r in doc["replicas"]] == ["Succeeded", "Succeeded"]
    out = Path(doc["output_dir"])
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["workers"] == 2 and 0.0 < metrics["test_accuracy"] <= 1.0
    import tensorflow as tf

    x = np.load(REPO / "examples" / "mnist" / "data" / "mnist.npz")["x_test"][:8]
    model = tf.saved_model.load(str(out / "model"))
    serve = model.signatures["serving_default"]
    (pred,) = serve(tf.constant(x.reshape(8, 28, 28, 1).astype("float32") / 255.0)).values()
    assert pred.shape == (8, 10)
    # the epoch metric lines reached the store
    assert [m["data"]["epoch"] for m in Store(mw_home).metrics(doc["id"], "epoch") if m["replica"] == "worker-0"] == [1]
    # steps per execution "auto": chosen after 15 one-step calls, the same on both workers
    chosen = [re.findall(r"(\d+) steps per execution", (out.parent / "attempt_0" / f"worker-{i}.log").read_text())
              for i in (0, 1)]
    assert chosen[0] == chosen[1] and len(chosen[0]) == 1 and 1 <= int(chosen[0][0]) <= 10, chosen


def test_ctrl_c_stops_tensorflow_workers_at_once(mw_home):
    """MultiWorkerMirroredStrategy installs a native SIGTERM handler that only logs; the trainer
    library puts the default back, so a stop does not wait out the grace period (60 s here)."""
    launcher = mw_popen("run", JOB, "-q", "--set", "run_policy.grace_period=60s", "--", "--epochs", "50",
                        home=mw_home)
    job = running_job(mw_home)
    logs = [Path(mw_home, "jobs", job.id, "attempt_0", f"worker-{i}.log") for i in (0, 1)]
    wait_for(lambda: all("in sync" in log.read_text() for log in logs), timeout=600)  # strategy made
    start = time.monotonic()
    launcher.send_signal(signal.SIGINT)
    launcher.wait(timeout=300)
    took = time.monotonic() - start
    assert launcher.returncode == 130
    assert took < 40, f"the stop took {took:.1f} s: SIGTERM did not end the workers before the 60 s grace"
    doc = status(mw_home, job.id)
    assert doc["state"] == "Cancelled" and [r["state"] for r in doc["replicas"]] == ["Stopped", "Stopped"]
    assert no_processes_left(job.id)


def test_injected_kill_resumes_from_epoch_reached(mw_home):
    # Deterministic on any machine: the kill comes once worker-1 has reported the end of epoch 2.
    proc = mw("run", JOB, "-q", "--inject-failure", "worker-1@epoch:2:KILL", "--set", "run_policy.backoff=1s",
              "--", "--epochs", "4", "--steps-per-epoch", "40", home=mw_home)
    assert proc.returncode == 0, proc.stdout[-3000:]
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    before, _ = assert_resumed(mw_home, doc, 4)
    assert 2 <= before[-1] < 4, f"the kill did not come after epoch 2: {before}"
    assert no_processes_left(doc["id"])


def test_parameter_server_job(mw_home):
    proc = mw("run", JOB, "-q", "--set", "pools.chief.replicas=1", "--set", "pools.ps.replicas=1",
              "--", "--epochs", "1", "--steps-per-epoch", "20", home=mw_home)
    assert proc.returncode == 0, proc.stdout[-4000:]
    doc = status(mw_home)
    states = {r["name"]: r["state"] for r in doc["replicas"]}
    assert doc["state"] == "Succeeded"
    assert states["chief-0"] == "Succeeded" and states["ps-0"] == "Stopped"
    assert (Path(doc["output_dir"]) / "model").is_dir()
    assert no_processes_left(doc["id"])
