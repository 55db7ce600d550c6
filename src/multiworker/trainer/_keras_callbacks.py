"""Keras callbacks of the trainer library (imports tf_keras; loaded lazily by the package)."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import threading
import time
from typing import Any

import tensorflow as tf
import tf_keras as keras

from multiworker.trainer._backup import _applied_steps
from multiworker.trainer._report import emit

logger = logging.getLogger(__name__)

__all__ = ["EpochCheckpoint", "MetricsReporter"]


class MetricsReporter(keras.callbacks.Callback):
    """Emit ``progress`` lines (at most every ``interval`` seconds) and one ``epoch`` line per epoch.

    images_per_sec is ``global_batch_size * steps run / epoch seconds``; it is left out when
    the global batch size is not given. An epoch resumed from a mid-epoch backup says at which
    step it started (``start_step``, 0-based; absent when 0).

    Under ParameterServerStrategy the batch hooks run as the coordinator *schedules* steps, often
    a whole epoch's within the first seconds, and the epoch then waits for them: there progress is
    read every ``interval`` seconds from a thread, as the optimizer steps the parameter servers
    have applied (``optimizer.iterations``), so that ``step:N`` faults and the console follow
    training itself.
    """

    def __init__(self, global_batch_size: int | None = None, *, interval: float = 2.0):
        super().__init__()
        self.global_batch_size = global_batch_size
        self.interval = interval
        self._supports_tf_logs = True  # batch hooks never force a device sync
        self._epochs: int | None = None
        self._steps: int | None = None
        self._epoch = 0
        self._batches = 0
        self._first_batch: int | None = None
        self._epoch_start = 0.0
        self._last_progress = 0.0
        self._applied = _AppliedSteps(self)

    def on_train_begin(self, logs: Any = None) -> None:
        self._epochs = self.params.get("epochs")
        self._steps = self.params.get("steps")
        if getattr(self.model, "_cluster_coordinator", None) is not None:
            self._applied.start()

    def on_train_end(self, logs: Any = None) -> None:
        self._applied.stop()

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        self._epoch = epoch
        self._batches = 0
        self._first_batch = None
        self._epoch_start = self._last_progress = time.monotonic()
        self._applied.epoch_begins()

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if self._first_batch is None:
            self._first_batch = batch

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        self._batches = batch + 1
        now = time.monotonic()
        if not self._applied.running and now - self._last_progress >= self.interval:
            self._last_progress = now
            self._progress(self._batches)

    def _progress(self, step: int) -> None:
        emit("progress", epoch=self._epoch + 1, epochs=self._epochs, step=step, steps=self._steps)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        self._applied.epoch_ends()
        seconds = time.monotonic() - self._epoch_start
        fields = {k: _scalar(v) for k, v in (logs or {}).items()}
        start = self._first_batch or 0
        if start:
            fields["start_step"] = start
        if self.global_batch_size and seconds > 0:
            fields["images_per_sec"] = round(self.global_batch_size * (self._batches - start) / seconds, 1)
        emit("epoch", **fields, epoch=epoch + 1, epochs=self._epochs, steps=self._batches,
             seconds=round(seconds, 3))


class _AppliedSteps:
    """A MetricsReporter's progress under ParameterServerStrategy: a daemon thread that reads
    ``optimizer.iterations`` every ``interval`` seconds while an epoch runs and reports the steps
    applied in it (plus the step a resumed epoch started at), only when it has grown: any output
    counts as advancing for hang detection (:mod:`multiworker.hangs`), so a stalled job must stay
    quiet. A read that fails (a parameter server gone) reports nothing; the launcher sees the
    failure elsewhere. A read that blocks (a stopped parameter server) holds no lock, so the
    epoch's own hooks never wait for it."""

    def __init__(self, reporter: MetricsReporter):
        self._reporter = reporter
        self._lock = threading.Lock()
        self._base: int | None = None  # iterations when the running epoch began; None between epochs
        self._reported = 0  # iterations at the last report (or the epoch's start)
        self._stopped = threading.Event()  # a new one for each thread
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(self._stopped,), name="multiworker-applied-steps",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._thread = None
        with self._lock:
            self._base = None

    def epoch_begins(self) -> None:
        if self.running:
            base = self._read()  # the last epoch was joined: no steps are in flight
            with self._lock:
                self._base, self._reported = base, base or 0

    def epoch_ends(self) -> None:
        with self._lock:  # no progress line of this epoch after its epoch line
            self._base = None

    def _read(self) -> int | None:
        try:
            return _applied_steps(self._reporter.model)
        except Exception as exc:  # noqa: BLE001  (a parameter server gone: no report this time)
            logger.debug("applied steps not read: %s", exc)
            return None

    def _run(self, stopped: threading.Event) -> None:
        reporter = self._reporter
        while not stopped.wait(reporter.interval):
            with self._lock:
                base = self._base
            if base is None:
                continue
            applied = self._read()
            with self._lock:  # the epoch may have ended (or another begun) during the read
                if applied is None or self._base != base or stopped.is_set() or applied <= self._reported:
                    continue
                self._reported = applied
                step = (reporter._first_batch or 0) + applied - base
                reporter._progress(min(step, reporter._steps) if reporter._steps else step)


def _scalar(value: Any) -> Any:
    if hasattr(value, "numpy"):
        value = value.numpy()
    try:
        return float(value)
    except (TypeError, ValueError):
        return value


class EpochCheckpoint(keras.callbacks.Callback):
    """Save ``tf.train.Checkpoint(model=model)`` as ``<directory>/ckpt-<epoch>`` after each epoch.

    These are the checkpoints an evaluator replica watches (BackupAndRestore deletes its own at
    the end). Every worker saves, since saving may need all of them under
    MultiWorkerMirroredStrategy, but only the chief into ``directory``; the others write into
    a temporary directory removed at the end. The newest ``max_to_keep`` are kept.
    """

    def __init__(self, directory: str, *, is_chief: bool, max_to_keep: int = 3):
        super().__init__()
        self.directory = directory
        self.is_chief = is_chief
        self.max_to_keep = max_to_keep
        self._manager: tf.train.CheckpointManager | None = None
        self._scratch: str | None = None

    def on_train_begin(self, logs: Any = None) -> None:
        target = self.directory
        if not self.is_chief:
            self._scratch = target = tempfile.mkdtemp(prefix="multiworker-ckpt-")
        self._manager = tf.train.CheckpointManager(
            tf.train.Checkpoint(model=self.model), target, max_to_keep=self.max_to_keep)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        path = self._manager.save(checkpoint_number=epoch + 1)
        if self.is_chief:
            logger.info("saved checkpoint %s", path)

    def on_train_end(self, logs: Any = None) -> None:
        if self._scratch and os.path.isdir(self._scratch):
            shutil.rmtree(self._scratch, ignore_errors=True)
        self._scratch = None
