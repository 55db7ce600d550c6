"""Train the MNIST CNN with Keras 3 on JAX across processes (keras.distribution.DataParallel).

Each replica is one JAX process: ``keras.distribution.initialize()`` reads the coordinator address,
process count and process id from ``KERAS_DISTRIBUTION_*`` (multiworker, like Kubeflow Trainer, sets
them with ``JAX_*``). Every process feeds its own half of the images; gradients are averaged over the
processes' CPU devices through JAX's gloo collectives. The chief backs up the weights each epoch and
a restarted group resumes from that backup; it exports a SavedModel that ``multiworker serve`` serves.

Run by hand, alone: ``cd examples/mnist_keras_jax && KERAS_BACKEND=jax python -m trainer.task --epochs 1``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

WALL_START = time.time()
os.environ.setdefault("KERAS_BACKEND", "jax")
if os.environ.get("MULTIWORKER_THREADS") == "1":  # the launcher's share of the cores: one thread for XLA too
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import distributed  # noqa: E402  (the coordination service's barrier)

from multiworker import trainer  # noqa: E402  (context, metric lines, metrics.json: no TensorFlow)

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "mnist" / "data" / "mnist.npz"
log = logging.getLogger("mnist_keras_jax")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=64, help="per process (replica)")
    parser.add_argument("--learning-rate", type=float, default=3e-3, help="one-cycle peak")
    parser.add_argument("--data", default=str(DEFAULT_DATA), help="Keras-layout mnist.npz")
    parser.add_argument("--steps-per-epoch", type=int, default=None, help="shorter epochs for quick tests")
    parser.add_argument("--progress-every", type=int, default=20, help="a progress line every N steps")
    parser.add_argument("--steps-per-execution", type=int, default=10,
                        help="training steps in one call of the compiled train function")
    return parser.parse_args(argv)


def initialize() -> tuple[int, int]:
    """Join the JAX processes (CPU collectives over gloo) and train data-parallel over every device."""
    n = int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1"))
    if n > 1:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        keras.distribution.initialize()  # KERAS_DISTRIBUTION_JOB_ADDRESSES, _NUM_PROCESSES, _PROCESS_ID
        # JAX's preemption notifier catches SIGTERM and only logs it: a stop would wait out the grace period.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # Each process feeds its own shard (numpy arrays, no tf.data): no auto-sharding.
        keras.distribution.set_distribution(keras.distribution.DataParallel(auto_shard_dataset=False))
    keras.utils.set_random_seed(42)  # the same initial weights in every process
    return jax.process_index(), jax.process_count()


def build_model(peak: float, total_steps: int, steps_per_execution: int = 1) -> keras.Model:
    """Conv32-Pool-Conv64-Pool-Conv64-Flatten-Dense64-Dense10 (the TensorFlow example's CNN), Adam with a
    one-cycle schedule: linear warm-up to ``peak`` over 20% of the steps, cosine decay to peak/50."""
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
    ], name="mnist_cnn")
    warm = max(1, int(0.2 * total_steps))
    rate = keras.optimizers.schedules.CosineDecay(peak / 10, max(1, total_steps - warm), alpha=0.02,
                                                  warmup_target=peak, warmup_steps=warm)
    model.compile(optimizer=keras.optimizers.Adam(rate),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                  steps_per_execution=steps_per_execution)
    return model


class ChiefBackup(keras.callbacks.BackupAndRestore):
    """Keras 3's BackupAndRestore for a group of processes: every process restores from the backup and
    takes part in saving it (reading replicated weights back is a collective), but only process 0
    writes the backup; the others write a scratch copy, then all wait until the backup is complete."""

    def __init__(self, backup_dir: str, scratch_dir: str):
        super().__init__(backup_dir, double_checkpoint=True)
        self.scratch, self.saves = scratch_dir, 0

    def _save_model(self):
        if jax.process_index() == 0:
            self._save_atomically()
        else:
            os.makedirs(self.scratch, exist_ok=True)
            self.model.save_weights(os.path.join(self.scratch, "scratch.weights.h5"), overwrite=True)
        if jax.process_count() > 1:
            # The coordination service's barrier (multihost_utils.sync_global_devices runs a computation,
            # which under keras.distribution's mesh compares the wrong shards).
            self.saves += 1
            distributed.global_state.client.wait_at_barrier(f"backup-{self.saves}", 600_000)


    def _save_atomically(self):
        """Keras writes the backup in place, so a process stopped mid-save (the group is stopped when a
        peer dies) would leave a file the restart cannot read: write each file aside, then rename it."""
        os.makedirs(self.backup_dir, exist_ok=True)
        staged = self._weights_path.removesuffix(".weights.h5") + ".staged.weights.h5"
        self.model.save_weights(staged, overwrite=True)
        os.replace(staged, self._weights_path)
        with open(self._training_metadata_path + ".staged", "w") as f:
            json.dump({"epoch": self._current_epoch, "batch": self._last_batch_seen}, f)
        os.replace(self._training_metadata_path + ".staged", self._training_metadata_path)

    def on_train_end(self, logs=None):
        if jax.process_index() == 0:  # one process removes the backup (two would race over its files)
            super().on_train_end(logs)


class MetricLines(keras.callbacks.Callback):
    """multiworker's metric lines: progress every few steps (global step), one line per epoch."""

    def __init__(self, epochs: int, steps: int, batch: int, every: int):
        super().__init__()
        self.epochs, self.steps, self.batch, self.every = epochs, steps, batch, every

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch, self.started, self.reported = epoch, time.time(), 0

    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) // self.every > self.reported:  # batch advances by steps_per_execution
            self.reported = (batch + 1) // self.every
            trainer.emit("progress", epoch=self.epoch + 1, epochs=self.epochs, step=batch + 1, steps=self.steps)

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.time() - self.started
        trainer.emit("epoch", epoch=epoch + 1, epochs=self.epochs, steps=self.steps, seconds=round(seconds, 3),
                     images_per_sec=round(self.batch * self.steps / seconds, 1),
                     **{k: float(v) for k, v in (logs or {}).items()})


def load(path: str, rank: int, size: int):
    with np.load(path) as data:
        x_train, y_train, x_test, y_test = data["x_train"], data["y_train"], data["x_test"], data["y_test"]
    def prep(x):
        return (x.astype("float32") / 255.0)[..., None]
    # Each process its own equal shard: the same number of steps everywhere.
    per = len(x_train) // size
    shard = slice(rank * per, (rank + 1) * per)
    return prep(x_train[shard]), y_train[shard].astype("int32"), prep(x_test), y_test.astype("int32")


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    rank, size = initialize()
    ctx = trainer.context()
    x, y, x_test, y_test = load(args.data, rank, size)
    steps = args.steps_per_epoch or len(x) // args.batch_size
    x, y = x[:steps * args.batch_size], y[:steps * args.batch_size]
    net = build_model(args.learning_rate, steps * args.epochs, args.steps_per_execution)
    net.build((None, 28, 28, 1))
    net.optimizer.build(net.trainable_variables)
    backup = ChiefBackup(os.path.join(ctx.checkpoint_dir, "backup"),
                         os.path.join(tempfile.gettempdir(), f"mnist-keras-jax-{os.getpid()}"))
    log.info("process %d of %d, %d steps per epoch of %d images each", rank, size, steps, args.batch_size * size)

    fit_start = time.time()
    history = net.fit(x, y, batch_size=args.batch_size, epochs=args.epochs, shuffle=True, verbose=0,
                      callbacks=[backup, MetricLines(args.epochs, steps, args.batch_size * size, args.progress_every)])
    train_seconds = time.time() - fit_start
    epochs_run = len(history.epoch)
    # Every process evaluates its half of the test set; the global metric averages them.
    half = len(x_test) // size
    test_loss, test_accuracy = net.evaluate(x_test[rank * half:(rank + 1) * half],
                                            y_test[rank * half:(rank + 1) * half], batch_size=100, verbose=0)
    model_dir = ctx.model_dir
    if ctx.is_chief:
        net.export(model_dir)  # a SavedModel (jax2tf): `multiworker serve` serves it
    trainer.write_metrics_json({
        "test_accuracy": float(test_accuracy), "test_loss": float(test_loss), "epochs": args.epochs,
        "epochs_run": epochs_run, "first_epoch": history.epoch[0] + 1 if history.epoch else None,
        "processes": size, "global_batch_size": args.batch_size * size, "steps_per_epoch": steps,
        "train_seconds": round(train_seconds, 3), "wall_seconds": round(time.time() - WALL_START, 3),
        "attempt": ctx.attempt, "model_dir": model_dir, "framework": "jax",
    })
    return 0


if __name__ == "__main__":
    try:
        code = main()
    except Exception:
        # Exit now: JAX's exit handler would wait minutes for the other processes at a shutdown barrier.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    raise SystemExit(code)
