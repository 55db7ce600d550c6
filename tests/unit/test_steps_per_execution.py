"""Steps per execution in trainer.fit: parsing, the choice rule, when "auto" stands aside, a real
fit in one process, and step-level backups counting steps (not calls) when a call runs several."""

from __future__ import annotations

import os

import pytest
from test_trainer_callbacks import job, make_data, make_model  # noqa: F401  (fixture)

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


@pytest.mark.parametrize("value, expected", [
    ("auto", None), (None, None), (1, 1), (10, 10), ("4", 4), (" 7 ", 7),
], ids=["auto", "none", "one", "ten", "digits", "spaces"])
def test_parse(value, expected):
    from multiworker.trainer._execution import parse_steps_per_execution

    assert parse_steps_per_execution(value) == expected


@pytest.mark.parametrize("value", [0, -3, "0", "many", True, 2.5, "1.5"],
                         ids=["zero", "negative", "zero-str", "word", "bool", "float", "float-str"])
def test_parse_rejects(value):
    from multiworker.trainer._execution import parse_steps_per_execution

    with pytest.raises(ValueError, match="expected 'auto' or a number of steps >= 1"):
        parse_steps_per_execution(value)


@pytest.mark.parametrize("step_seconds, expected", [
    (0.020, 10), (0.060, 8), (0.100, 5), (0.4, 1), (3.0, 1), (0.0, 10),
], ids=["20ms-capped", "60ms", "100ms", "400ms", "slow", "zero"])
def test_steps_for(step_seconds, expected):
    from multiworker.trainer._execution import steps_for

    assert steps_for(step_seconds) == expected


def test_own_batch_hooks_are_told_apart():
    import tf_keras as keras

    from multiworker.trainer._execution import has_own_batch_hooks
    from multiworker.trainer._keras_callbacks import MetricsReporter

    class Counter(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            pass

    class EpochOnly(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            pass

    assert has_own_batch_hooks(Counter())
    assert has_own_batch_hooks(keras.callbacks.LambdaCallback(on_batch_end=lambda batch, logs: None))
    assert not has_own_batch_hooks(EpochOnly())
    assert not has_own_batch_hooks(keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: None))
    assert not has_own_batch_hooks(keras.callbacks.ModelCheckpoint("/tmp/unused", save_freq=5))
    assert not has_own_batch_hooks(MetricsReporter(16))


def test_configure_stands_aside(job):  # noqa: F811
    import tf_keras as keras

    from multiworker.trainer._execution import (
        MAX_STEPS,
        AutoStepsPerExecution,
        configure,
    )

    data = make_data()
    model = make_model()
    execution = configure(model, "auto", [], data=data)
    assert [type(c) for c in execution.callbacks] == [AutoStepsPerExecution] and execution.own == 1
    assert int(model.steps_per_execution.numpy()) == MAX_STEPS  # > 1: fit builds the multi-step function
    execution.restore()
    assert int(model.steps_per_execution.numpy()) == 1

    counted = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: None)
    aside = configure(make_model(), "auto", [counted], data=data)
    assert (aside.callbacks, aside.own) == ([], None)

    compiled = make_model()
    compiled.compile(optimizer="adam", loss="mse", steps_per_execution=4)
    assert configure(compiled, "auto", [], data=data).own is None
    assert int(compiled.steps_per_execution.numpy()) == 4

    unsized = data.filter(lambda x, y: True)  # Keras cannot count its steps: one step a call
    assert configure(make_model(), "auto", [], data=unsized).own is None
    assert configure(make_model(), "auto", [], data=unsized, steps_per_epoch=4).own == 1

    asked = make_model()
    execution = configure(asked, 3, [counted])  # asked for: applied even with batch hooks
    assert (execution.callbacks, execution.own) == ([], 1)
    assert int(asked.steps_per_execution.numpy()) == 3


@pytest.mark.parametrize("proposal, keep_one, expected", [(7, False, 7), (40, False, 10), (7, True, 1), (0, False, 1)],
                         ids=["proposal", "capped", "kept-to-one", "at-least-one"])
def test_agree_in_one_process(proposal, keep_one, expected):
    import tensorflow as tf

    from multiworker.trainer._execution import agree

    assert agree(tf.distribute.get_strategy(), proposal, keep_one=keep_one) == expected


def test_validation_of_unknown_size_inside_fit(job, caplog):  # noqa: F811
    """Keras refuses several steps a call on validation data of unknown size: the calls that end an
    epoch run one step each, so the validation runs one a call; training keeps its several."""
    import logging

    import tensorflow as tf

    from multiworker import trainer
    from multiworker.trainer._execution import size_known

    unknown = make_data(n=64, batch=16).filter(lambda x, y: tf.reduce_all(tf.math.is_finite(x)))
    assert not size_known(unknown, None) and size_known(unknown, 4) and size_known(make_data(), None)
    model = make_model()
    with caplog.at_level(logging.INFO, logger="multiworker.trainer._execution"):
        history = trainer.fit(model, make_data(n=640, batch=16).repeat(), epochs=3, steps_per_epoch=40,
                              global_batch_size=16, verbose=0, validation_data=unknown)
    assert len(history.history["val_loss"]) == 3
    assert "10 steps per execution" in caplog.text  # the tiny model's steps take well under 50 ms
    sized = trainer.fit(make_model(), make_data(n=640, batch=16).repeat(), epochs=2, steps_per_epoch=40,
                        global_batch_size=16, verbose=0, validation_data=make_data(n=64, batch=16))
    assert len(sized.history["val_loss"]) == 2  # known size: Keras validates several steps a call
    assert int(model.steps_per_execution.numpy()) == 1


def test_fit_chooses_then_restores_and_trains_the_same(job):  # noqa: F811
    import numpy as np
    import tf_keras as keras

    from multiworker import trainer

    def train(steps_per_execution, probe=None):
        keras.utils.set_random_seed(3)
        model = make_model()
        history = trainer.fit(model, make_data(n=640, batch=16).repeat(), epochs=2, steps_per_epoch=40,
                              global_batch_size=16, verbose=0, steps_per_execution=steps_per_execution,
                              callbacks=[probe] if probe else None)
        return model, history

    class Calls(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.ends = []

        def on_train_batch_end(self, batch, logs=None):
            self.ends.append(batch)

    auto, auto_history = train("auto")
    assert int(auto.steps_per_execution.numpy()) == 1  # the compiled value, back after fit
    explicit_calls = Calls()
    explicit, _ = train(5, explicit_calls)
    assert explicit_calls.ends[:3] == [4, 9, 14]  # 5 steps a call: batch hooks see each call's last step
    one_calls = Calls()
    one, one_history = train("auto", one_calls)  # a batch hook of its own keeps one step a call
    assert one_calls.ends[:3] == [0, 1, 2] and len(one_calls.ends) == 80
    for a, b, c in zip(auto.get_weights(), explicit.get_weights(), one.get_weights()):
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(b, c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(auto_history.history["loss"], one_history.history["loss"], rtol=1e-5)


def test_auto_picks_from_the_timed_calls_and_agrees(job):  # noqa: F811
    import tf_keras as keras

    from multiworker.trainer._execution import AutoStepsPerExecution

    seen = []

    class Spy(AutoStepsPerExecution):
        def on_train_batch_end(self, batch, logs=None):
            super().on_train_batch_end(batch, logs)
            seen.append((batch, int(self.model.steps_per_execution.numpy())))

    model = make_model()
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    spy = Spy(target=1e9, warmup_calls=2, probe_calls=4)  # any step fits: the cap decides
    model.steps_per_execution = 10
    model.fit(make_data(n=640, batch=16).repeat(), epochs=1, steps_per_epoch=30, verbose=0, callbacks=[spy])
    assert [b for b, _ in seen[:4]] == [0, 1, 2, 3]  # one step a call until the choice
    assert spy.chosen == 10 and seen[3][1] == 10
    assert [b for b, _ in seen[4:]] == [13, 23, 29]  # then 10 a call; the last call runs what is left


def test_step_backup_counts_steps_not_calls(job, capsys):  # noqa: F811
    from multiworker.trainer._backup import StepBackup
    from multiworker.trainer._backup_policy import parse_backup_every

    model = make_model()
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", steps_per_execution=5)
    every_10 = StepBackup(str(job / "backup"), parse_backup_every(10))
    model.fit(make_data(n=640, batch=16).repeat(), epochs=1, steps_per_epoch=40, verbose=0, callbacks=[every_10])
    assert every_10.backups == 4  # steps 10, 20, 30, 40; counting calls of 5 steps would give 0


def test_step_backup_resumes_after_the_last_step_of_a_call(job):  # noqa: F811
    """The backup of a call of 5 steps records its last step, so a restart resumes after it."""
    from multiworker.trainer._backup import StepBackup
    from multiworker.trainer._backup_policy import parse_backup_every

    def model():
        m = make_model()
        m.compile(optimizer="adam", loss="sparse_categorical_crossentropy", steps_per_execution=5)
        return m

    class Crash(StepBackup):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 25:
                raise RuntimeError("replica lost")
            super().on_train_batch_begin(batch, logs)

    data = make_data(n=640, batch=16).repeat()
    with pytest.raises(RuntimeError, match="replica lost"):
        model().fit(data, epochs=2, steps_per_epoch=40, verbose=0,
                    callbacks=[Crash(str(job / "backup"), parse_backup_every(10))])
    starts = []

    class Starts(StepBackup):
        def on_train_batch_begin(self, batch, logs=None):
            starts.append((self._current_epoch, batch))
            super().on_train_batch_begin(batch, logs)

    model().fit(data, epochs=2, steps_per_epoch=40, verbose=0,
                callbacks=[Starts(str(job / "backup"), parse_backup_every(10))])
    assert starts[0] == (0, 20)  # the backup after steps 15-19 (at 20 steps): resume at step 20, not 16
