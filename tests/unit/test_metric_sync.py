"""Mean metrics synchronised in one all-reduce a step (multiworker.trainer._metric_sync)."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("tf_keras")

from multiworker.trainer._metric_sync import sync_metrics_in_one_all_reduce  # noqa: E402


def _train(strategy, batched: bool) -> tuple[dict, list, bool]:
    keras.utils.set_random_seed(3)
    x = np.random.RandomState(0).rand(64, 4).astype("float32")
    y = (x.sum(axis=1) > 2).astype("float32")
    with strategy.scope():
        model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(1, activation="sigmoid")])
        model.compile(optimizer="sgd", loss="binary_crossentropy",
                      metrics=["accuracy", keras.metrics.MeanSquaredError(), keras.metrics.AUC(name="auc")])
    applied = sync_metrics_in_one_all_reduce(model) if batched else False
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


def test_left_alone_outside_multi_worker_or_when_overridden(monkeypatch):
    model = keras.Sequential([keras.layers.Input(shape=(2,)), keras.layers.Dense(1)])
    model.compile(loss="mse", metrics=["mae"])
    assert sync_metrics_in_one_all_reduce(model) is False  # default strategy
    monkeypatch.setattr(tf.distribute, "MultiWorkerMirroredStrategy", type(tf.distribute.get_strategy()))

    class Own(keras.Sequential):
        def get_metrics_result(self):
            return {}

    own = Own([keras.layers.Input(shape=(2,)), keras.layers.Dense(1)])
    assert sync_metrics_in_one_all_reduce(own) is False  # the user's override stands
    assert sync_metrics_in_one_all_reduce(model) is True
    assert sync_metrics_in_one_all_reduce(model) is False  # once
