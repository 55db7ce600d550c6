"""Commands that run TensorFlow in the CLI's own process (``serve``, ``data tfrecords``) start without
TensorFlow's native chatter (oneDNN banner, CUDA probing, cuInit errors) unless ``-v``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from multiworker.procs import free_ports

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.integration

CHATTER = ("oneDNN custom operations", "cuda drivers", "cuInit", "absl::InitializeLog")


def _env(home: Path) -> dict:
    env = {**os.environ, "MULTIWORKER_HOME": str(home), "PYTHONPATH": str(REPO / "src")}
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # as a newcomer's shell has it
    return env


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    from PIL import Image

    root = tmp_path_factory.mktemp("images")
    for label in ("cat", "dog"):
        (root / label).mkdir()
        for i in range(3):
            Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(root / label / f"{i}.png")
    return root


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "verbose"])
def test_data_tfrecords_is_quiet_unless_verbose(images, tmp_path, mw_home, verbose):
    args = [sys.executable, "-m", "multiworker", "data", "tfrecords", str(images), str(tmp_path / "out"),
            "--size", "8", "--json", *(["-v"] if verbose else [])]
    done = subprocess.run(args, env=_env(mw_home), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]
    noisy = [line for line in done.stderr.splitlines() if any(c in line for c in CHATTER)]
    if verbose:
        assert noisy, done.stderr  # shown with -v: the filter hides it, nothing else did
    else:
        assert not noisy, done.stderr


def test_serve_starts_quietly(tmp_path, mw_home):
    import tensorflow as tf

    class Double(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32)])
        def __call__(self, x):
            return {"y": x * 2.0}

    model = Double()
    tf.saved_model.save(model, str(tmp_path / "double" / "1"), signatures={"serving_default": model.__call__})
    errors = tmp_path / "serve.err"
    with open(errors, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "multiworker", "serve", str(tmp_path / "double"), "--port",
                                 str(free_ports(1)[0]), "--json"], env=_env(mw_home), stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        line = proc.stdout.readline()  # printed once it serves: TensorFlow is loaded and the model too
        assert line, f"serve exited with {proc.wait()}: {errors.read_text()[-2000:]}"
        assert json.loads(line)["version"] == 1
    finally:
        proc.terminate()
        proc.wait(60)
    text = errors.read_text()
    assert not [line for line in text.splitlines() if any(c in line for c in CHATTER)], text
