"""Step-level backups: parsing backup_every, the interval rule, and a mid-epoch resume in one process."""

from __future__ import annotations

import os

import pytest
from test_trainer_callbacks import job, make_data, make_model, metric_lines  # noqa: F401  (fixture)

from multiworker.trainer._backup_policy import (
    AUTO_SECONDS,
    MAX_COST,
    BackupSchedule,
    parse_backup_every,
    steps_between_backups,
)

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


@pytest.mark.parametrize("value, expected", [
    ("auto", BackupSchedule("seconds", seconds=AUTO_SECONDS, max_cost=MAX_COST)),
    (None, BackupSchedule("seconds", seconds=AUTO_SECONDS, max_cost=MAX_COST)),
    ("epoch", BackupSchedule("epoch")),
    (100, BackupSchedule("steps", steps=100)),
    ("25", BackupSchedule("steps", steps=25)),
    ("10s", BackupSchedule("seconds", seconds=10.0)),
    ("2.5 s", BackupSchedule("seconds", seconds=2.5)),
    (3.0, BackupSchedule("seconds", seconds=3.0)),
], ids=["auto", "none", "epoch", "int", "digits", "seconds", "fraction", "float"])
def test_parse_backup_every(value, expected):
    assert parse_backup_every(value) == expected


@pytest.mark.parametrize("value", [0, "0", -3, "abc", True, "10m", "0s", 0.0, "epochs"])
def test_parse_backup_every_rejects(value):
    with pytest.raises(ValueError, match="expected 'auto', 'epoch'"):
        parse_backup_every(value)


def test_steps_between_backups():
    auto = parse_backup_every("auto")
    assert steps_between_backups(0.01, 0.001, auto) == 200  # 2 s of 10 ms steps
    assert steps_between_backups(0.01, 0.03, auto) == 200  # a 30 ms save costs 1.5% of 2 s: no stretch
    assert steps_between_backups(0.01, 0.15, auto) == 1000  # a 0.15 s save stretches it to 10 s (1.5%)
    assert steps_between_backups(0.01, 0.2, parse_backup_every("2s")) == 200  # fixed seconds: no stretch
    assert steps_between_backups(30.0, 0.1, auto) == 1  # steps longer than the interval
    assert steps_between_backups(0.0, 0.0, auto) >= 1


def test_parameter_server_falls_back_to_epoch_backups(tmp_path):
    from multiworker.trainer._backup import StepBackup, backup_callback

    auto = parse_backup_every("auto")
    assert isinstance(backup_callback(str(tmp_path), auto), StepBackup)
    fallback = backup_callback(str(tmp_path), auto, parameter_server=True)
    assert not isinstance(fallback, StepBackup) and fallback.save_freq == "epoch"
    assert backup_callback(str(tmp_path), parse_backup_every(7)).save_freq == 7


def test_auto_backup_resumes_mid_epoch(job, capsys):  # noqa: F811
    import tf_keras as keras

    from multiworker import trainer

    class Crash(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 15:
                raise RuntimeError("replica lost")

    data = make_data(n=320, batch=16)  # 20 steps per epoch; the first backup comes after 10 steps
    with pytest.raises(RuntimeError, match="replica lost"):
        trainer.fit(make_model(), data, epochs=2, global_batch_size=16, callbacks=[Crash()], verbose=0)
    assert metric_lines(capsys, "epoch") == []
    from multiworker.trainer._backup import StepBackup

    backup = StepBackup(str(job / "checkpoints" / "backup"), parse_backup_every("auto"))
    history = make_model().fit(data, epochs=2, verbose=0, callbacks=[backup, *trainer.callbacks(16, backup=False)])
    assert history.epoch == [0, 1]
    assert backup.backups == 2 and backup.save_seconds > 0  # epoch ends (the interval is far beyond 10 steps)
    epochs = metric_lines(capsys, "epoch")
    assert [(m["epoch"], m.get("start_step"), m["steps"]) for m in epochs] == [(1, 10, 20), (2, None, 20)]
    assert not (job / "checkpoints" / "backup" / "chief").exists() or not os.listdir(
        job / "checkpoints" / "backup" / "chief")


CPUINFO = "processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: fpu sse avx2 {extra}\n\nprocessor\t: 1\n"


@pytest.mark.parametrize("asked, extra, expected", [
    ("auto", "avx512f avx512_bf16", "mixed_bfloat16"),
    ("auto", "amx_bf16 amx_tile", "mixed_bfloat16"),
    ("auto", "avx512f", "float32"),
    ("float32", "avx512_bf16", "float32"),
    ("mixed_float16", "", "mixed_float16"),
], ids=["avx512-bf16", "amx", "no-bf16", "forced-f32", "forced-f16"])
def test_choose_precision(asked, extra, expected):
    from multiworker.trainer._precision import choose_precision, cpu_flags

    flags = cpu_flags(CPUINFO.format(extra=extra))
    assert "avx2" in flags
    assert choose_precision(asked, flags) == expected


def test_choose_precision_rejects_unknown():
    from multiworker.trainer._precision import choose_precision

    with pytest.raises(ValueError, match="expected one of auto, float32"):
        choose_precision("bf16", set())
    assert choose_precision("auto", set()) == "float32"


def test_a_sigterm_inside_deferred_sigterm_acts_when_the_block_ends():
    import os
    import signal

    from multiworker.trainer._peer_loss import deferred_sigterm

    seen = []
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: seen.append(signum))
    try:
        with deferred_sigterm():
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # let Python run its handlers: the signal is only held
                pass
            assert seen == []
        assert seen == [signal.SIGTERM]  # delivered to the handler in place before the block
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_only_a_lost_peer_triggers_the_last_backup():
    import tensorflow as tf

    from multiworker.trainer._peer_loss import save_after_peer_loss

    class Backup:
        calls = 0

        def save_after_peer_loss(self):
            Backup.calls += 1
            return True

    callbacks = [object(), Backup()]
    assert save_after_peer_loss(callbacks, tf.errors.UnavailableError(None, None, "peer gone")) is True
    assert save_after_peer_loss(callbacks, tf.errors.InvalidArgumentError(None, None, "a bug")) is False
    assert save_after_peer_loss(callbacks, ValueError("a bug")) is False
    assert save_after_peer_loss([object()], tf.errors.UnavailableError(None, None, "peer gone")) is False
    assert Backup.calls == 1
