"""JAX (Keras 3) and PyTorch jobs through `multiworker run`: the launch contract, and the examples
through a kill of the second process (restart, resume from the checkpoint).

`make test` checks the launch contract of both frameworks without either, and the Keras 3 example's
kill, resume and served export on short epochs. The full trainings to >= 99% run under
`make test-frameworks` (MULTIWORKER_TEST_FULL=1: several minutes each on 2 loaded cores) and the
PyTorch one under `make test-torch` (MULTIWORKER_TEST_TORCH=1): PyTorch is an extra outside dev."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
from helpers import REPO, epochs_by_attempt, mw, no_processes_left, status

sys.path.insert(0, str(REPO / "tests" / "unit"))
from test_framework_env import documented  # noqa: E402

pytestmark = pytest.mark.integration
MNIST = REPO / "examples" / "mnist" / "data" / "mnist.npz"
PROBE = Path(__file__).with_name("_framework_probe.py")


@pytest.mark.parametrize("framework", ["jax", "pytorch"])
def test_every_replica_gets_the_documented_variables_and_the_group_meets(framework, mw_home, tmp_path):
    spec = tmp_path / "job.yaml"
    spec.write_text(json.dumps({
        "name": f"probe-{framework}", "framework": framework, "command": [sys.executable, str(PROBE)],
        "env": {"PROBE_FRAMEWORK": framework}, "pools": {"chief": {"replicas": 1}, "worker": {"replicas": 2}},
        "run_policy": {"restart_policy": "Never"}}))
    proc = mw("run", str(spec), "-q", home=mw_home, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:]
    doc = status(mw_home)
    out = Path(doc["output_dir"])
    for name in ("chief-0", "worker-0", "worker-1"):
        assert set(json.loads((out / f"probe-{name}.json").read_text())) == documented()[framework], name


def _needs(*modules: str) -> None:
    if not MNIST.exists():
        pytest.skip(f"{MNIST} is missing")
    for module in modules:
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"{module} is not installed (pip install multiworker[{'torch' if module == 'torch' else 'jax'}])")


FULL = os.environ.get("MULTIWORKER_TEST_FULL") == "1"
TORCH = FULL or os.environ.get("MULTIWORKER_TEST_TORCH") == "1"


def _killed_and_resumed(example: str, home: Path, *args: str, epochs: int = 2,
                        target: float = 0.99) -> tuple[dict, Path]:
    """Train the example (``epochs``, its default 2 unless ``args`` say), killing worker-1 once it has
    finished epoch 1: the resumed attempt must run epochs 2.. only."""
    job = str(REPO / "examples" / example / "job.yaml")
    proc = mw("run", job, "-q", "--inject-failure", "worker-1@epoch:1", "--set", "run_policy.backoff=1s",
              *(["--", *args] if args else []), home=home, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-3000:]
    doc = status(home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    before, after = epochs_by_attempt(home, doc["id"])
    out = Path(doc["output_dir"])
    metrics = json.loads((out / "metrics.json").read_text())
    # resumed after the last epoch backed up before the kill: epoch 1, or a later one the first attempt
    # finished while the group was being stopped; never from scratch, never skipping an epoch
    first = metrics["first_epoch"]
    assert before[0] == 1 and 2 <= first <= max(before) + 1 and after == list(range(first, epochs + 1)), (before, after)
    assert metrics["epochs_run"] == epochs - first + 1 and metrics["processes"] == 2
    assert metrics["test_accuracy"] >= target, metrics
    assert no_processes_left(doc["id"])
    return metrics, out


@pytest.mark.timeout(900)
def test_keras_jax_example_resumes_after_a_kill_and_its_export_serves(mw_home):
    _needs("jax", "keras")
    # 3 epochs after the kill's trigger: the kill lands while training goes on, however fast the machine
    _killed_and_resumed("mnist_keras_jax", mw_home, "--epochs", "4", "--steps-per-epoch", "40", epochs=4, target=0.8)
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("uvicorn")
    import numpy as np

    from multiworker.procs import free_ports

    (port,) = free_ports(1)
    env = {**os.environ, "MULTIWORKER_HOME": str(mw_home), "PYTHONPATH": str(REPO / "src")}
    import subprocess

    serve = subprocess.Popen([sys.executable, "-m", "multiworker", "serve", status(mw_home)["id"], "--port", str(port),
                              "--json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        info = json.loads(serve.stdout.readline() or "{}")
        assert info, f"serve exited with {serve.wait()}"
        with np.load(MNIST) as data:
            x, y = data["x_test"][:64], data["y_test"][:64]
        images = (x.astype("float32") / 255.0)[..., None]
        reply = httpx.post(info["url"] + ":predict", json={"instances": images.tolist()}, timeout=120)
        assert reply.status_code == 200, reply.text[:500]
        predictions = np.array(reply.json()["predictions"])
        assert predictions.shape == (64, 10)
        assert (predictions.argmax(1) == y).mean() >= 0.75
    finally:
        serve.terminate()
        serve.wait(timeout=300)


@pytest.mark.timeout(2400)
@pytest.mark.skipif(not FULL, reason="the full training (minutes) runs under make test-frameworks")
def test_keras_jax_example_reaches_99_percent_through_a_kill(mw_home):
    _needs("jax", "keras")
    _killed_and_resumed("mnist_keras_jax", mw_home)


@pytest.mark.timeout(2400)
@pytest.mark.skipif(not TORCH, reason="the PyTorch example runs under make test-torch and make test-frameworks")
def test_torch_example_reaches_99_percent_through_a_kill(mw_home):
    _needs("torch")
    _killed_and_resumed("mnist_torch", mw_home)
