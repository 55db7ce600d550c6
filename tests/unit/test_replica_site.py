"""The replicas' sitecustomize: "first" as tf-keras's default reduction only for a model that keeps
Keras's own steps, has chosen none, and runs under a multi-worker strategy (a stand-in for
tf_keras.src.engine.training, so no TensorFlow is needed)."""

from __future__ import annotations

import importlib.util
import types

import pytest

from multiworker.backends.local.group import REPLICA_SITE


@pytest.fixture
def site(monkeypatch):
    monkeypatch.setenv("MULTIWORKER_KERAS_LOG_FIX", "0")  # loading it must not hook this test process
    spec = importlib.util.spec_from_file_location("replica_site", REPLICA_SITE / "sitecustomize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _training():
    class Model:
        def __init__(self, strategy, chosen=None):
            self.distribute_strategy, self._distribute_reduction_method = strategy, chosen

        @property
        def distribute_reduction_method(self):
            return self._distribute_reduction_method or "auto"

        def train_step(self, data): ...
        def test_step(self, data): ...
        def compute_metrics(self, *args): ...
        def get_metrics_result(self): ...

    return types.SimpleNamespace(Model=Model, _collective_all_reduce_multi_worker=lambda s: s == "multi-worker")


def test_first_only_where_keras_would_sum_values_that_are_already_global(site):
    training = _training()
    site._patch(training)
    site._patch(training)  # once only

    class OwnStep(training.Model):
        def train_step(self, data): ...

    assert training.Model("multi-worker").distribute_reduction_method == "first"
    assert training.Model("mirrored").distribute_reduction_method == "auto"
    assert training.Model("multi-worker", chosen="sum").distribute_reduction_method == "sum"
    assert OwnStep("multi-worker").distribute_reduction_method == "auto"  # its own step may need the sum
    model = training.Model("multi-worker")
    model._distribute_reduction_method = "concat"
    assert model.distribute_reduction_method == "concat"


def test_a_tf_keras_of_another_shape_is_left_alone(site):
    training = types.SimpleNamespace(Model=type("Model", (), {}))
    site._patch(training)
    assert not hasattr(training.Model, "distribute_reduction_method")
