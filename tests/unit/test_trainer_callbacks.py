"""multiworker.trainer in one process: metric lines, backup/resume, checkpoints, evaluator, fit_kwargs."""

from __future__ import annotations

import json
import os

import pytest

from multiworker.metrics_line import parse_metric

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")


@pytest.fixture
def job(tmp_path, monkeypatch):
    """A lone replica (default strategy) writing under tmp_path."""
    from multiworker.trainer import _strategy

    for name in ("TF_CONFIG", "MULTIWORKER_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
                 "AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MULTIWORKER_OUTPUT_DIR", str(tmp_path))
    monkeypatch.setenv("MULTIWORKER_JOB_ID", "unit")
    monkeypatch.setattr(_strategy, "_strategy", None)
    return tmp_path


def make_model():
    import tf_keras as keras

    model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(3)])
    model.compile(optimizer="adam", metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def make_data(n=64, batch=16):
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int64") + (x[:, 1] > 1)
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def metric_lines(capsys, kind=None):
    lines = [parse_metric(line) for line in capsys.readouterr().out.splitlines()]
    return [m for m in lines if m and (kind is None or m["kind"] == kind)]


def test_fit_reports_checkpoints_and_marks_done(job, capsys):
    from multiworker import trainer

    history = trainer.fit(make_model(), make_data(), epochs=2, global_batch_size=16, verbose=0)
    assert history.epoch == [0, 1]
    epochs = metric_lines(capsys, "epoch")
    assert [m["epoch"] for m in epochs] == [1, 2]
    assert all(m["epochs"] == 2 and m["steps"] == 4 and m["images_per_sec"] > 0 for m in epochs)
    assert {"loss", "accuracy", "seconds"} <= set(epochs[0])
    ckpts = job / "checkpoints"
    assert (ckpts / "ckpt-2.index").exists() and (ckpts / "checkpoint").exists()
    assert not list((ckpts / "backup").iterdir())  # BackupAndRestore cleans up after success
    assert json.loads((job / "TRAINING_DONE").read_text())["final_checkpoint"].endswith("ckpt-2")


def test_progress_lines(job, capsys):
    from multiworker import trainer

    model = make_model()
    model.fit(make_data(), epochs=1, verbose=0,
              callbacks=trainer.callbacks(16, backup=False, checkpoints=False, progress_interval=0))
    progress = metric_lines(capsys, "progress")
    assert [m["step"] for m in progress] == [1, 2, 3, 4]
    assert progress[0] == {"kind": "progress", "epoch": 1, "epochs": 1, "step": 1, "steps": 4}


def test_parameter_server_progress_is_the_steps_applied_not_scheduled(monkeypatch):
    """Under ParameterServerStrategy the batch hooks run as steps are scheduled (a whole epoch in its
    first seconds): progress is read from optimizer.iterations instead, only when it grew (a stalled
    job stays quiet for hang detection), never between epochs, and a resumed epoch counts from its
    first step."""
    import threading
    import types

    import tensorflow as tf

    from multiworker.trainer import _keras_callbacks
    from multiworker.trainer._keras_callbacks import MetricsReporter, _AppliedSteps

    lines: list[dict] = []
    reads: list[int | None] = []
    changed = threading.Condition()
    read = _AppliedSteps._read

    def record(into: list, value):
        with changed:
            into.append(value)
            changed.notify_all()
        return value

    monkeypatch.setattr(_keras_callbacks, "emit", lambda kind, **fields: record(lines, {"kind": kind, **fields}))
    monkeypatch.setattr(_AppliedSteps, "_read", lambda self: record(reads, read(self)))

    def polls(n: int) -> None:  # wait until the thread has read n more times
        target = len(reads) + n
        with changed:
            assert changed.wait_for(lambda: len(reads) >= target, timeout=300)

    def wait_lines(n: int) -> None:
        with changed:
            assert changed.wait_for(lambda: len(lines) >= n, timeout=300), lines

    iterations = tf.Variable(100, dtype=tf.int64)
    model = types.SimpleNamespace(_cluster_coordinator=object(), optimizer=types.SimpleNamespace(iterations=iterations))
    reporter = MetricsReporter(64, interval=0.01)
    reporter.set_model(model)
    reporter.set_params({"epochs": 2, "steps": 50, "verbose": 0})
    reporter.on_train_begin()
    reporter.on_epoch_begin(0)
    for batch in range(50):  # the coordinator schedules the whole epoch
        reporter.on_train_batch_begin(batch)
        reporter.on_train_batch_end(batch)
    polls(3)
    assert lines == []  # scheduled, none applied yet
    iterations.assign(120)
    wait_lines(1)
    polls(3)
    assert lines == [{"kind": "progress", "epoch": 1, "epochs": 2, "step": 20, "steps": 50}]
    iterations.assign(150)
    reporter.on_epoch_end(0, {"loss": 0.5})
    assert [m["kind"] for m in lines] == ["progress", "epoch"] and lines[1]["steps"] == 50

    reporter.on_epoch_begin(1)
    reporter.on_train_batch_begin(30)  # resumed from a backup taken after step 30
    iterations.assign(160)
    wait_lines(3)  # the steps between the epochs belong to neither
    assert lines[2] == {"kind": "progress", "epoch": 2, "epochs": 2, "step": 40, "steps": 50}
    thread = reporter._applied._thread
    reporter.on_train_end()
    thread.join(timeout=300)
    assert not thread.is_alive()


def test_backup_and_restore_resumes(job, capsys):
    import tf_keras as keras

    from multiworker import trainer

    class Crash(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if epoch == 2:
                raise RuntimeError("replica lost")

    with pytest.raises(RuntimeError, match="replica lost"):
        trainer.fit(make_model(), make_data(), epochs=4, callbacks=[Crash()], verbose=0)
    assert [m["epoch"] for m in metric_lines(capsys, "epoch")] == [1, 2]
    assert not (job / "TRAINING_DONE").exists()
    history = trainer.fit(make_model(), make_data(), epochs=4, verbose=0)
    assert history.epoch == [2, 3]
    assert [m["epoch"] for m in metric_lines(capsys, "epoch")] == [3, 4]


def test_run_evaluator_follows_checkpoints(job, capsys):
    from multiworker import trainer

    data = make_data()
    trainer.fit(make_model(), data, epochs=2, verbose=0)
    capsys.readouterr()
    result = trainer.run_evaluator(make_model(), data, poll_seconds=0.1)
    assert result["checkpoint"].endswith("ckpt-2") and result["epoch"] == 2 and result["step"] == 8
    assert {"loss", "accuracy"} <= set(result)
    evals = metric_lines(capsys, "eval")
    assert evals and evals[-1]["checkpoint"] == result["checkpoint"]
    saved = json.loads((job / "eval_metrics.json").read_text())
    assert saved["epoch"] == 2 and saved["history"][-1]["checkpoint"] == result["checkpoint"]


def test_fit_on_evaluator_evaluates_then_exits(job, monkeypatch, capsys):
    from multiworker import trainer

    data = make_data()
    trainer.fit(make_model(), data, epochs=1, verbose=0)
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["h:1", "h:2"]},
                                                "task": {"type": "evaluator", "index": 0}}))
    with pytest.raises(ValueError, match="pass eval_data"):
        trainer.fit(make_model(), data, epochs=1)
    with pytest.raises(SystemExit) as exit_info:
        trainer.fit(make_model(), data, epochs=1, eval_data=data)
    assert exit_info.value.code == 0
    assert [m["epoch"] for m in metric_lines(capsys, "eval")] == [1]


def test_fit_kwargs(job):
    import tensorflow as tf
    import tf_keras as keras

    from multiworker import trainer

    data = make_data()  # 4 batches
    assert trainer.fit_kwargs(data) == {"x": data, "steps_per_epoch": None}
    assert trainer.fit_kwargs(data, steps_per_epoch=4)["x"] is data
    short = trainer.fit_kwargs(data, steps_per_epoch=3)
    assert short["steps_per_epoch"] == 3 and int(short["x"].cardinality()) == tf.data.INFINITE_CARDINALITY
    with pytest.raises(ValueError, match="steps_per_epoch"):
        trainer.fit_kwargs(lambda ctx: data)
    creator = trainer.fit_kwargs(lambda ctx: data, steps_per_epoch=2)
    assert isinstance(creator["x"], keras.utils.experimental.DatasetCreator)
