"""Benchmark: training images/s with mixed_bfloat16 vs float32 on this CPU.

examples/cats_vs_dogs' CNN on in-memory random images (so only compute is measured), same
batch size and steps for both policies, one run each after a warm-up epoch. bfloat16 pays on
CPUs with AVX512-BF16 or AMX; elsewhere TensorFlow emulates it. Prints one JSON object.

    .venv/bin/python bench/precision_bf16.py [--size 128] [--steps 30] [--epochs 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]


def _cvd_model():
    spec = importlib.util.spec_from_file_location("cvd_model", REPO / "examples" / "cats_vs_dogs" / "trainer" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cpu_flags() -> dict:
    try:
        flags = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        flags = set()
    return {f: f in flags for f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile")}


def _images_per_sec(cvd, keras, tf, precision: str, args) -> float:
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(0)
    x = tf.random.uniform([args.batch_size * 4, args.size, args.size, 3])
    y = tf.random.uniform([args.batch_size * 4], maxval=2, dtype=tf.int64)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size).repeat().prefetch(4)
    model = cvd.build_model(args.size, 2)
    model.fit(ds, epochs=1, steps_per_epoch=args.steps, verbose=0)  # warm-up: tracing, oneDNN kernels
    start = time.perf_counter()
    model.fit(ds, epochs=args.epochs, steps_per_epoch=args.steps, verbose=0)
    return args.batch_size * args.steps * args.epochs / (time.perf_counter() - start)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args()

    import tensorflow as tf
    import tf_keras as keras

    cvd = _cvd_model()
    out: dict = {"benchmark": "mixed_bfloat16_vs_float32", "model": "examples/cats_vs_dogs CNN",
                 "size": args.size, "batch_size": args.batch_size, "steps_timed": args.steps * args.epochs,
                 "cpu_count": os.cpu_count(), "cpu_flags": _cpu_flags(), "tensorflow": tf.__version__}
    for precision in ("float32", "mixed_bfloat16"):
        out[f"{precision}_images_per_sec"] = round(_images_per_sec(cvd, keras, tf, precision, args), 1)
    out["bf16_speedup"] = round(out["mixed_bfloat16_images_per_sec"] / out["float32_images_per_sec"], 2)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
