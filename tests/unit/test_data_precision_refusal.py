"""cats_vs_dogs refuses --precision mixed_float16 without a GPU: one line, exit code 2."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("tensorflow")

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cats_vs_dogs"


@pytest.fixture(scope="module")
def cvd_model():
    spec = importlib.util.spec_from_file_location("cats_vs_dogs_model", EXAMPLE / "trainer" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("precision", "gpus", "match"),
    [
        ("float32", 0, None),
        ("mixed_bfloat16", 0, None),
        ("mixed_float16", 1, None),
        ("mixed_float16", 0, "needs a GPU and none is visible; on a CPU use --precision mixed_bfloat16"),
        ("float64", 0, "unknown; use one of float32, mixed_bfloat16, mixed_float16"),
    ],
    ids=["f32-cpu", "bf16-cpu", "f16-gpu", "f16-cpu-refused", "unknown"],
)
def test_check_precision(cvd_model, precision, gpus, match):
    error = cvd_model.check_precision(precision, gpus=gpus)
    if match is None:
        assert error is None
    else:
        assert match in error and "\n" not in error


def test_task_refuses_float16_on_cpu_with_one_line_and_exit_2(tmp_path):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "MULTIWORKER_OUTPUT_DIR": str(tmp_path)}
    env.pop("TF_CONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "trainer.task", "--precision", "mixed_float16",
                           "--data", str(tmp_path / "none")], cwd=EXAMPLE, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: --precision mixed_float16 needs a GPU and none is visible; on a CPU use "
                      "--precision mixed_bfloat16 (fast with AVX512-BF16 or AMX) or float32"]
    assert "Traceback" not in proc.stderr
