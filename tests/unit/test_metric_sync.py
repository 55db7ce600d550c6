"""A step's metrics synchronised in one all-reduce (multiworker.trainer._metric_sync)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("tf_keras")

from multiworker.trainer._metric_sync import sync_step_metrics  # noqa: E402


def _train(strategy, batched: bool) -> tuple[dict, list, bool]:
    keras.utils.set_random_seed(3)
    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    y = (x.sum(axis=1) > 2).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(1, activation="sigmoid")])
        model.compile(optimizer="sgd", loss="binary_crossentropy",
                      metrics=["accuracy", keras.metrics.MeanSquaredError(), keras.metrics.AUC(name="auc")])
    applied = sync_step_metrics(model) if batched else False
    steps: list[dict] = []  # each step's logs: what the train step computed (epoch logs are re-read)
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: steps.append({k: float(v) for k, v in logs.items()}))
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0, callbacks=[record])
    return {"steps": steps, **history.history}, model.evaluate(x, y, verbose=0), applied


def test_the_same_logs_and_evaluation_from_one_all_reduce(monkeypatch):
    # A one-device MirroredStrategy stands in for MultiWorkerMirroredStrategy: the same replica
    # context and all_reduce, in one process.
    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", tf.distribute.MirroredStrategy)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    keras_logs, keras_eval, _ = _train(strategy, batched=False)
    logs, evaluation, applied = _train(strategy, batched=True)
    assert applied
    assert len(logs["steps"]) == 8
    assert set(logs["steps"][0]) == {"loss", "accuracy", "mean_squared_error", "auc"}  # AUC: its own result()
    assert logs == keras_logs and evaluation == keras_eval


def _model(cls=None):
    model = (cls or keras.Sequential)([keras.layers.Input(shape=(2,)), keras.layers.Dense(1)])
    model.compile(loss="mse", metrics=["mae"])
    return model


def test_left_alone_outside_multi_worker(monkeypatch):
    model = _model()
    assert model._distribute_reduction_method is None  # the attribute this relies on exists in tf-keras
    assert sync_step_metrics(model) is False  # default strategy: Keras's own behaviour stands
    assert model._distribute_reduction_method is None and "get_metrics_result" not in vars(model)


def test_logs_from_this_worker_and_the_users_choices_kept(monkeypatch):
    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", type(tf.distribute.get_strategy()))

    class Own(keras.Sequential):
        def get_metrics_result(self):
            return {}

    own = _model(Own)
    assert sync_step_metrics(own) is False  # the user's get_metrics_result stands
    assert own.distribute_reduction_method == "first"  # logs: this worker's (already global) values
    chosen = _model()
    chosen.distribute_reduction_method = "sum"
    assert sync_step_metrics(chosen) is True
    assert chosen.distribute_reduction_method == "sum"  # the user's reduction stands
    assert sync_step_metrics(chosen) is False  # once
