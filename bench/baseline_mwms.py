"""Plain tf-keras MultiWorkerMirroredStrategy MNIST: the baseline `multiworker run` is compared to.

Deliberately free of multiworker imports: it is the tutorial's script (same CNN, recipe and
data as examples/mnist), reading TF_CONFIG itself. Each worker prints one JSON line with its
timings; bench/mnist_launch_baseline.py launches N of them by hand.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

WALL_START = time.time()
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

DEFAULT_DATA = Path(__file__).resolve().parents[1] / "examples" / "mnist" / "data" / "mnist.npz"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--learning-rate", type=float, default=3e-3)
    p.add_argument("--optimizer", choices=["onecycle", "sgd"], default="onecycle",
                   help="onecycle: Adam with examples/mnist's one-cycle schedule (its recipe); "
                        "sgd: constant-rate SGD, the tutorials' recipe (with --learning-rate 0.01 --epochs 3)")
    p.add_argument("--steps-per-epoch", type=int, default=None)
    p.add_argument("--data", default=str(DEFAULT_DATA))
    return p.parse_args(argv)


def one_cycle(peak, total_steps, warmup=0.2):
    """examples/mnist/trainer/model.py's OneCycle, restated so this script stays free of the example."""
    warm = max(1.0, warmup * total_steps)

    class OneCycle(keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            step = tf.cast(step, tf.float32)
            progress = tf.minimum((step - warm) / max(1.0, total_steps - warm), 1.0)
            return tf.where(step < warm, peak * (0.1 + 0.9 * step / warm),
                            peak * (0.02 + 0.49 * (1.0 + tf.cos(np.pi * progress))))

        def get_config(self):
            return {"peak": peak, "total_steps": total_steps, "warmup": warmup}
    return OneCycle()


def build_model(learning_rate, decay_steps, optimizer="onecycle"):
    """The tutorials' CNN, compiled as examples/mnist/trainer/model.py does (or with their SGD)."""
    model = keras.Sequential([
        keras.layers.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ])
    if optimizer == "sgd":
        opt = keras.optimizers.SGD(learning_rate)
    else:
        opt = keras.optimizers.Adam(one_cycle(learning_rate, decay_steps))
    model.compile(
        optimizer=opt,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def datasets(path, global_batch):
    with np.load(path) as d:
        x_train, y_train, x_test, y_test = d["x_train"], d["y_train"], d["x_test"], d["y_test"]
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA

    def prep(x, y):
        return tf.cast(x, tf.float32)[..., None] / 255.0, tf.cast(y, tf.int64)

    train = (tf.data.Dataset.from_tensor_slices((x_train, y_train))
             .shuffle(len(x_train), seed=42, reshuffle_each_iteration=True)
             .batch(global_batch).map(prep, num_parallel_calls=tf.data.AUTOTUNE)
             .prefetch(tf.data.AUTOTUNE).with_options(options))
    test = (tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(global_batch)
            .map(prep, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)
            .with_options(options))
    return train, test, len(x_train)


def main(argv=None):
    args = parse_args(argv)
    # Same thread budget as multiworker gives its replicas (a careful hand launch sets it too).
    if os.environ.get("TF_NUM_INTRAOP_THREADS"):
        tf.config.threading.set_intra_op_parallelism_threads(int(os.environ["TF_NUM_INTRAOP_THREADS"]))
        tf.config.threading.set_inter_op_parallelism_threads(int(os.environ["TF_NUM_INTEROP_THREADS"]))
    tf_config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = tf_config.get("task", {})
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    train, test, n_train = datasets(args.data, global_batch)
    steps = args.steps_per_epoch or -(-n_train // global_batch)
    if args.steps_per_epoch:
        train = train.repeat()
    with strategy.scope():
        model = build_model(args.learning_rate, steps * args.epochs, args.optimizer)
    start = time.time()
    model.fit(train, epochs=args.epochs, steps_per_epoch=steps, verbose=0)
    train_seconds = time.time() - start
    loss, accuracy = model.evaluate(test, verbose=0)
    print(json.dumps({
        "task_type": task.get("type"), "task_index": task.get("index"),
        "workers": strategy.num_replicas_in_sync, "epochs": args.epochs,
        "global_batch_size": global_batch, "steps_per_epoch": steps,
        "train_seconds": round(train_seconds, 3),
        "images_per_sec": round(global_batch * steps * args.epochs / train_seconds, 1),
        "test_accuracy": round(float(accuracy), 5), "test_loss": round(float(loss), 5),
        "wall_seconds": round(time.time() - WALL_START, 3),
        "fit_start_unix": round(start, 3),
    }), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
