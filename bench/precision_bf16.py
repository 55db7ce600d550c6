"""Benchmark: training images/s with mixed_bfloat16 vs float32 on this CPU.

examples/cats_vs_dogs' CNN on in-memory random images (so only compute is measured), same
batch size and steps for both policies; after a warm-up, timed runs alternate between them and
the medians are compared. bfloat16 pays on CPUs with AVX512-BF16 or AMX; elsewhere TensorFlow
emulates it. Prints one JSON object.

    .venv/bin/python bench/precision_bf16.py [--size 128] [--steps 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
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


def _build(cvd, keras, precision: str, size: int):
    keras.mixed_precision.set_global_policy(precision)
    keras.utils.set_random_seed(0)
    model = cvd.build_model(size, 2)
    keras.mixed_precision.set_global_policy("float32")
    return model


def _timed_fit(model, ds, steps: int, batch_size: int) -> float:
    start = time.perf_counter()
    model.fit(ds, epochs=1, steps_per_epoch=steps, verbose=0)
    return batch_size * steps / (time.perf_counter() - start)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--steps", type=int, default=20, help="steps per timed run")
    p.add_argument("--repeats", type=int, default=5, help="timed runs per precision, interleaved")
    args = p.parse_args()

    import tensorflow as tf
    import tf_keras as keras

    cvd = _cvd_model()
    out: dict = {"benchmark": "mixed_bfloat16_vs_float32", "model": "examples/cats_vs_dogs CNN",
                 "size": args.size, "batch_size": args.batch_size, "steps_per_run": args.steps,
                 "repeats": args.repeats, "cpu_count": os.cpu_count(), "cpu_flags": _cpu_flags(),
                 "tensorflow": tf.__version__}
    x = tf.random.uniform([args.batch_size * 4, args.size, args.size, 3], seed=1)
    y = tf.random.uniform([args.batch_size * 4], maxval=2, dtype=tf.int64, seed=2)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size).repeat().prefetch(4)
    precisions = ("float32", "mixed_bfloat16")
    models = {p: _build(cvd, keras, p, args.size) for p in precisions}
    for model in models.values():  # warm-up: tracing, oneDNN kernel selection
        _timed_fit(model, ds, 3, args.batch_size)
    samples: dict[str, list[float]] = {p: [] for p in precisions}
    for _ in range(args.repeats):  # interleaved, so drifting machine load hits both alike
        for p in precisions:
            samples[p].append(round(_timed_fit(models[p], ds, args.steps, args.batch_size), 1))
    for p in precisions:
        out[f"{p}_images_per_sec"] = statistics.median(samples[p])
        out[f"{p}_samples"] = samples[p]
    out["bf16_speedup"] = round(out["mixed_bfloat16_images_per_sec"] / out["float32_images_per_sec"], 2)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
