"""Benchmark: training images/s from TFRecords vs decoding and resizing JPEGs every epoch.

Same model (examples/flowers' CNN), same images, same batch size; one run each. The JPEG
path reads the class-folder tree and decodes + resizes every photo in every epoch; the
TFRecord path reads the output of ``multiworker data tfrecords`` (resized once). The first
epoch of each is a warm-up and is not timed. Prints one JSON object.

    .venv/bin/python bench/tfrecords_throughput.py [--src DIR] [--size 128] [--epochs 4]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data" / "flower_photos"


def _flowers_model():
    spec = importlib.util.spec_from_file_location("flowers_model", REPO / "examples" / "flowers" / "trainer" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Timer:
    """Images/s over every epoch but the first (warm-up: tracing, file cache)."""

    def __init__(self):
        self.times: list[float] = []
        self.images: list[int] = []

    def callback(self, keras, batch_size: int):
        timer = self

        class Cb(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                self.start, self.batches = time.perf_counter(), 0

            def on_train_batch_end(self, batch, logs=None):
                self.batches = batch + 1

            def on_epoch_end(self, epoch, logs=None):
                timer.times.append(time.perf_counter() - self.start)
                timer.images.append(self.batches * batch_size)

        return Cb()

    def rate(self) -> float:
        return sum(self.images[1:]) / sum(self.times[1:])


def _pipeline_rate(ds, passes: int = 2) -> float:
    """Images/s of the input pipeline alone (no model), after one warm-up pass."""
    for _ in ds:
        pass
    start, n = time.perf_counter(), 0
    for _ in range(passes):
        for images, _ in ds:
            n += int(images.shape[0])
    return n / (time.perf_counter() - start)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", default=str(SHARED if SHARED.is_dir() else REPO / "examples" / "flowers" / "data"))
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=32)
    args = p.parse_args()

    import tensorflow as tf
    import tf_keras as keras

    from multiworker.data import (
        images_to_tfrecords,
        read_image_folder,
        read_tfrecords,
        shard_pattern,
    )

    flowers = _flowers_model()
    out: dict = {"benchmark": "tfrecords_vs_jpeg_decode", "src": args.src, "size": args.size,
                 "epochs_timed": args.epochs - 1, "batch_size": args.batch_size,
                 "cpu_count": os.cpu_count(), "machine": platform.processor() or platform.machine(),
                 "tensorflow": tf.__version__}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        result = images_to_tfrecords(args.src, tmp, size=args.size, shards=4, val_split=0.0)
        out["conversion_seconds"] = round(time.perf_counter() - start, 2)
        out["images"] = result.counts["train"]

        pipelines = {
            "jpeg_decode_each_epoch": read_image_folder(args.src, args.size)[0],
            "tfrecords": read_tfrecords(shard_pattern(tmp, "train"), args.size),
        }
        for name, ds in pipelines.items():
            batched = ds.batch(args.batch_size).prefetch(tf.data.AUTOTUNE)
            out[f"{name}_pipeline_images_per_sec"] = round(_pipeline_rate(batched), 1)
            keras.utils.set_random_seed(0)
            model = flowers.build_model(args.size, len(result.classes))
            timer = _Timer()
            model.fit(batched, epochs=args.epochs, verbose=0, callbacks=[timer.callback(keras, args.batch_size)])
            out[f"{name}_train_images_per_sec"] = round(timer.rate(), 1)
    out["train_speedup"] = round(out["tfrecords_train_images_per_sec"] / out["jpeg_decode_each_epoch_train_images_per_sec"], 2)
    out["pipeline_speedup"] = round(
        out["tfrecords_pipeline_images_per_sec"] / out["jpeg_decode_each_epoch_pipeline_images_per_sec"], 2)
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
