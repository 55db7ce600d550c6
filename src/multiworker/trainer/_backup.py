"""Step-level backups: BackupAndRestore saving every N steps or every few seconds of training.

tf-keras' own BackupAndRestore saves at epoch ends (a kill loses up to an epoch of every worker)
or every ``save_freq`` steps, and with ``save_freq`` an integer it restores the step within the
epoch too. ``StepBackup`` adds a time-based interval: under MultiWorkerMirroredStrategy every
worker must save at the same step, so the interval is a step count the workers agree on (the
mean of their proposals, one small all-reduce per backup), re-derived at each backup from the
measured step and save times. Steps are counted from the step indices Keras passes to the batch
hooks, not from the hook calls, so the schedule holds with several steps per execution (a call of
the train function that runs N steps counts N). When a peer is lost, the chief also saves the step
it reached (``save_after_peer_loss``, see :mod:`multiworker.trainer._peer_loss`).

Under MultiWorkerMirroredStrategy only the chief writes a backup. tf-keras has every worker save,
the others into a temporary directory deleted at once, only so that each takes part in the
all-reduces that read the SyncOnReadVariables (Keras's metric totals and counts,
BatchNormalization's moving statistics). Here the chief saves those from its own part, scaled to
all workers for a sum, as the last backup after a peer loss does, so a backup runs no collective
and the other workers write nothing. A restart therefore resumes those variables from the chief's
values (the resumed epoch's running training metrics, and moving statistics that keep updating);
weights, optimizer state and the step are exact. Imports tf_keras; loaded lazily by the package.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from typing import Any

import tensorflow as tf
import tf_keras as keras

from multiworker.trainer._backup_policy import BackupSchedule, steps_between_backups
from multiworker.trainer._execution import agree
from multiworker.trainer._peer_loss import deferred_sigterm, local_metric_reads

logger = logging.getLogger(__name__)

__all__ = ["StepBackup", "backup_callback"]

#: Steps run before the first timed backup (the first step, which traces the graph, is not timed).
PROBE_STEPS = 10


def backup_callback(backup_dir: str, schedule: BackupSchedule, *, parameter_server: bool = False) -> Any:
    """The backup callback for ``schedule``.

    tf-keras skips its batch hooks under ParameterServerStrategy, so there a step schedule would
    never save (nor restore the epoch): it falls back to a backup per epoch.
    """
    if schedule.mode == "epoch":
        return keras.callbacks.BackupAndRestore(backup_dir)
    if parameter_server:
        logger.info("ParameterServerStrategy: backups per epoch (tf-keras has no step-level backup there)")
        return keras.callbacks.BackupAndRestore(backup_dir)
    return StepBackup(backup_dir, schedule)


class StepBackup(keras.callbacks.BackupAndRestore):
    """BackupAndRestore that saves every ``schedule.steps`` steps, or about every
    ``schedule.seconds`` of training at a step count all workers agree on and at every epoch end;
    a restarted group resumes at the step of the last backup."""

    def __init__(self, backup_dir: str, schedule: BackupSchedule, *, probe_steps: int = PROBE_STEPS):
        fixed = schedule.steps if schedule.mode == "steps" else None
        # An integer save_freq makes tf-keras record and restore the step within the epoch.
        super().__init__(backup_dir, save_freq=fixed or max(1, probe_steps))
        self.schedule = schedule
        self.probe_steps = fixed or max(1, probe_steps)
        self.interval: int | None = fixed  # steps between backups: fixed, or agreed once measured
        self._last_batch = 0
        self._call_start = 0
        self._steps = 0  # steps trained in this fit (a call of the train function may run several)
        self._next = self.probe_steps
        self._mark: tuple[float, int] | None = None
        self._saved_at = 0
        self.backups = 0
        self.written = 0  # backups this worker wrote itself (under MWMS, the chief alone)
        self.save_seconds = 0.0  # spent saving, over the whole fit
        self._fit_start = 0.0
        self._epoch_iterations: int | None = None  # optimizer steps applied when the epoch began
        self._epoch_first_batch: int | None = None  # the epoch's first step (not 0 when resumed)
        self._saved_batch: int | None = None  # the step of this epoch's last backup
        self._chief_saves_alone = False  # under MWMS the other workers skip the save (see the module doc)

    def on_train_begin(self, logs: Any = None) -> None:
        super().on_train_begin(logs)
        epoch = int(self._training_state._ckpt_saved_epoch.numpy())
        batch = int(self._training_state._ckpt_saved_batch.numpy())
        if epoch >= 0 and batch >= 0:
            logger.info("resuming from the backup taken at epoch %d, step %d", epoch + 1, batch + 1)
        mwms = isinstance(self.model.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy)
        self._chief_saves_alone = mwms and _create_save_counter(self._training_state)
        self._steps, self._next, self._mark, self._saved_at = 0, self.probe_steps, None, 0
        self._call_start = 0
        self.backups, self.written, self.save_seconds, self._fit_start = 0, 0, 0.0, time.monotonic()

    def on_train_end(self, logs: Any = None) -> None:
        seconds = time.monotonic() - self._fit_start
        logger.info("backups: %d taken, %.3f s saving = %.2f%% of %.1f s of training; %d written by this worker",
                    self.backups, self.save_seconds, 100 * self.save_seconds / max(seconds, 1e-9), seconds,
                    self.written)
        super().on_train_end(logs)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        super().on_epoch_begin(epoch, logs)
        self._epoch_first_batch = self._saved_batch = None
        self._epoch_iterations = _applied_steps(self.model)

    def save_after_peer_loss(self, why: str = "a peer was lost") -> bool:
        """Called when ``fit`` failed because a peer was lost (or stopped on a SIGTERM: ``why``): on the
        chief, back up the step this worker reached, without any collective. True if a backup was written."""
        strategy = self.model.distribute_strategy
        if not strategy.extended.should_checkpoint or self._epoch_first_batch is None:
            return False
        applied, at_begin = _applied_steps(self.model), self._epoch_iterations
        if applied is None or at_begin is None or applied <= at_begin:
            return False
        batch = self._epoch_first_batch + applied - at_begin - 1
        last = self._epoch_first_batch - 1 if self._saved_batch is None else self._saved_batch
        if batch <= last:  # nothing trained since the last backup
            return False
        with local_metric_reads() as local, deferred_sigterm():
            if not local:
                return False
            self._backup(epoch=self._current_epoch, batch=batch)
            # inside the block: a SIGTERM held during the save ends the process as the block ends
            logger.info("%s: backed up epoch %d, step %d (%d steps after the last backup)", why,
                        self._current_epoch + 1, batch + 1, batch - last)
        return True

    def _backup(self, epoch: int, batch: int = 0) -> None:
        self._saved_batch = batch
        start = time.monotonic()
        # tf-keras records the step at on_train_batch_begin, the first of a call; the weights saved
        # here are those after ``batch``, the call's last step, where a restart must resume after.
        self._training_state._ckpt_saved_batch.assign(batch)
        # Every worker decides alike: local reads on the chief and no save elsewhere, or all save.
        with local_metric_reads() if self._chief_saves_alone else contextlib.nullcontext(False) as local:
            if not local or self.model.distribute_strategy.extended.should_checkpoint:
                super()._backup(epoch=epoch, batch=batch)
                self.written += 1
        self.backups += 1
        self.save_seconds += time.monotonic() - start

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self.schedule.mode == "steps":  # as tf-keras's own: every N steps only
            return
        if self._saved_at != self._steps:  # the step counts, hence the decision, agree on all workers
            self._backup(epoch=epoch, batch=self._last_batch)
            self._saved_at = self._steps
            self._mark = (time.monotonic(), self._steps)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        super().on_train_batch_begin(batch, logs)
        if self._epoch_first_batch is None:
            self._epoch_first_batch = batch
        self._call_start = batch  # the first step of this call; on_train_batch_end gets its last

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        first_call = self._steps == 0
        self._steps += max(1, batch + 1 - self._call_start)
        self._last_batch = batch
        if first_call:
            self._mark = (time.monotonic(), self._steps)
        if self._steps < self._next:
            return
        if self.schedule.mode == "steps":
            self._backup(epoch=self._current_epoch, batch=batch)
            self._saved_at, self._next = self._steps, self._steps + self.interval
            return
        start = time.monotonic()
        mark_time, mark_steps = self._mark or (start, 0)
        step_seconds = (start - mark_time) / max(self._steps - mark_steps, 1)
        self._backup(epoch=self._current_epoch, batch=batch)
        save_seconds = time.monotonic() - start
        self._saved_at = self._steps
        proposal = steps_between_backups(step_seconds, save_seconds, self.schedule)
        interval = agree(self.model.distribute_strategy, proposal, most=sys.maxsize)  # same on all workers
        if interval != self.interval:
            logger.info("backups every %d steps (%.3f s/step, %.3f s/save)", interval, step_seconds, save_seconds)
        self.interval = interval
        self._next = self._steps + interval
        self._mark = (time.monotonic(), self._steps)


def _create_save_counter(training_state: Any) -> bool:
    """Create the backup checkpoint's ``save_counter`` now, on every worker (a checkpoint creates it
    at its first save, and under MultiWorkerMirroredStrategy creating a variable is a collective
    every worker must join, so the chief could not then save alone). True once it exists; False,
    creating nothing, where TensorFlow lacks these (every worker then saves, as tf-keras does)."""
    checkpoint = getattr(getattr(training_state, "write_checkpoint_manager", None), "_checkpoint", None)
    return getattr(checkpoint, "save_counter", None) is not None


def _applied_steps(model: Any) -> int | None:
    """Optimizer steps applied so far (this worker's copy, no collective); None without an optimizer."""
    iterations = getattr(getattr(model, "optimizer", None), "iterations", None)
    return None if iterations is None else int(iterations.numpy())
