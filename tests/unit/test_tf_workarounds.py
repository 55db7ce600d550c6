"""The TensorFlow workarounds the trainer library applies (see multiworker.trainer._tf_workarounds)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
tf = pytest.importorskip("tensorflow")

from tensorflow.python.data.ops import multi_device_iterator_ops as mdi  # noqa: E402

from multiworker.trainer import _fit, _tf_workarounds  # noqa: E402


def test_per_device_datasets_are_built_without_autotuning(monkeypatch):
    monkeypatch.setattr(mdi, "_create_device_dataset", lambda *a, **k: tf.data.Dataset.range(3))
    assert mdi._create_device_dataset().options().autotune.enabled is not False  # unset: on by default
    assert _tf_workarounds.untuned_per_device_datasets(tf) is True
    patched = mdi._create_device_dataset
    ds = patched()
    assert ds.options().autotune.enabled is False
    assert [int(x) for x in ds] == [0, 1, 2]  # the elements are untouched
    assert _tf_workarounds.untuned_per_device_datasets(tf) is True and mdi._create_device_dataset is patched  # once


def test_a_tensorflow_without_the_function_is_left_alone(monkeypatch):
    monkeypatch.delattr(mdi, "_create_device_dataset")
    assert _tf_workarounds.untuned_per_device_datasets(tf) is False


def test_a_real_multi_device_iterator_still_yields_every_element(monkeypatch):
    monkeypatch.setattr(mdi, "_create_device_dataset", mdi._create_device_dataset)  # restored afterwards
    _tf_workarounds.untuned_per_device_datasets(tf)
    iterator = mdi.OwnedMultiDeviceIterator(tf.data.Dataset.range(5), ["/cpu:0"])
    assert [int(next(iterator)[0]) for _ in range(5)] == [0, 1, 2, 3, 4]


def test_fit_untunes_only_datasets_under_multi_worker_mirrored():
    class Model:
        distribute_strategy = tf.distribute.get_strategy()

    data = tf.data.Dataset.range(2)
    assert _fit._untuned_under_mwms(Model(), data) is data  # one process: the user's options stand
    assert _fit._untuned_under_mwms(object(), [1, 2]) == [1, 2]


def test_sigterm_gets_its_default_action_back_unless_python_handles_it():
    import signal
    import threading

    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert _tf_workarounds.sigterm_stops_again() is True
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

        def mine(*_):
            pass

        signal.signal(signal.SIGTERM, mine)  # e.g. a PreemptionCheckpointHandler: left alone
        assert _tf_workarounds.sigterm_stops_again() is False
        assert signal.getsignal(signal.SIGTERM) is mine
        result = []
        thread = threading.Thread(target=lambda: result.append(_tf_workarounds.sigterm_stops_again()))
        thread.start()
        thread.join()
        assert result == [False]  # only the main thread may set handlers
    finally:
        signal.signal(signal.SIGTERM, previous)
