"""One vocabulary of bookkeeping keys (metrics_line): every reader of a resumed run's metrics (plot,
the dashboard's charts, ``status --json``, the console) draws and shows loss and accuracy, never
epoch, steps, start_step or seconds; and every key the trainer writes is either bookkeeping, a rate
or a real metric."""

from __future__ import annotations

import json
import math

import pytest
from rich.console import Console
from test_monitor_views import cli, record_job  # noqa: F401  (fixture)
from test_trainer_callbacks import job, make_data, make_model, metric_lines  # noqa: F401  (fixture)

from multiworker.job import Store
from multiworker.metrics_line import (
    BOOKKEEPING_KEYS,
    RATE_KEYS,
    curve_values,
    metric_values,
)
from multiworker.monitor.console import ConsoleObserver
from multiworker.monitor.format import fmt_metrics, format_progress
from multiworker.monitor.plot import collect_series, draw, drawn_lines
from multiworker.status import job_status
from multiworker.ui.views import Views

NOT_METRICS = BOOKKEEPING_KEYS | RATE_KEYS

# As MetricsReporter.on_epoch_end (trainer/_keras_callbacks.py) writes them: Keras logs, then
# start_step (a resumed epoch: the backup's step), images_per_sec, epoch, epochs, steps, seconds.
RESUMED_EPOCH = {"kind": "epoch", "loss": 0.21, "accuracy": 0.93, "start_step": 357, "images_per_sec": 5120.3,
                 "epoch": 3, "epochs": 4, "steps": 469, "seconds": 4.2}
LAST_EPOCH = {"kind": "epoch", "loss": 0.12, "accuracy": 0.96, "images_per_sec": 6001.0,
              "epoch": 4, "epochs": 4, "steps": 469, "seconds": 3.9}
# As _Evaluator.evaluate (trainer/_evaluator.py) writes it.
EVAL = {"kind": "eval", "checkpoint": "/out/checkpoints/ckpt-4", "epoch": 4, "step": 1876, "loss": 0.15,
        "accuracy": 0.95, "seconds": 0.8}


@pytest.fixture
def resumed(mw_home) -> tuple[Store, str]:
    """A job restarted once, whose chief resumed epoch 3 mid-epoch from the backup of step 357."""
    store = Store(mw_home)
    job_id = record_job(store, attempts=2)
    store.add_metric(job_id, 1, "chief-0", RESUMED_EPOCH)
    store.add_metric(job_id, 1, "chief-0", LAST_EPOCH)
    store.add_metric(job_id, 1, "chief-0", EVAL)
    return store, job_id


def test_plot_draws_metrics_not_bookkeeping(resumed):
    pytest.importorskip("matplotlib")
    store, job_id = resumed
    series = collect_series(store, job_id)
    assert set(series["epoch_metrics"]) == {"loss", "accuracy"}
    assert series["epoch_metrics"]["accuracy"]["chief-0"][-2:] == [[3, 0.93], [4, 0.96]]
    drawn = drawn_lines(draw(series))
    assert set(drawn["Loss per epoch"]) == {"loss"} and set(drawn["Accuracy per epoch"]) == {"accuracy"}


def test_dashboard_charts_draw_metrics_not_bookkeeping(resumed, mw_home):
    _, job_id = resumed
    views = Views(mw_home, ttl=0)
    assert set(views.series(job_id)["epoch_metrics"]) == {"loss", "accuracy"}
    assert views.compare([job_id])["metrics"] == ["accuracy", "loss"]
    summary = views.job(job_id)["status"]["last_metric_values"]  # the job page's "Last metrics"
    assert summary == {"loss": 0.12, "accuracy": 0.96, "images_per_sec": 6001.0}
    assert views.jobs()[0]["headline"] == {"name": "accuracy", "value": 0.96}


def test_status_json_shows_metrics_not_bookkeeping(resumed, cli):  # noqa: F811
    store, job_id = resumed
    doc = json.loads(cli("status", job_id, "--json").stdout)
    assert doc == job_status(store, job_id) | {"heartbeat_age_seconds": doc["heartbeat_age_seconds"],
                                               "duration_seconds": doc["duration_seconds"]}
    assert doc["last_metric_values"] == {"loss": 0.12, "accuracy": 0.96, "images_per_sec": 6001.0}
    assert doc["last_metrics"] == LAST_EPOCH  # the record itself, as written
    assert (doc["epoch"], doc["epochs"], doc["images_per_sec"]) == (4, 4, 6001.0)


def test_console_shows_metrics_not_bookkeeping():
    assert format_progress(RESUMED_EPOCH) == "epoch 3/4  loss 0.21  accuracy 0.93  5,120 images/s"
    assert fmt_metrics(EVAL) == "epoch 4  step 1876  loss 0.15  accuracy 0.95"
    console = Console(record=True, width=200)
    observer = ConsoleObserver(console=console)
    observer.on_metric("chief-0", RESUMED_EPOCH, primary=True)
    observer.on_metric("evaluator-0", EVAL, primary=False)
    observer.on_metric("chief-0", {"kind": "final", "test_accuracy": 0.97, "epochs_run": 4, "train_seconds": 61.0},
                       primary=True)
    assert console.export_text().splitlines() == [
        "[chief-0] epoch 3/4  loss 0.21  accuracy 0.93  5,120 images/s",
        "[evaluator-0] eval: epoch 4  step 1876  loss 0.15  accuracy 0.95",
        "[chief-0] final: test_accuracy 0.97",
    ]


@pytest.mark.parametrize("data, values, curves", [
    (RESUMED_EPOCH, {"loss": 0.21, "accuracy": 0.93, "images_per_sec": 5120.3}, {"loss": 0.21, "accuracy": 0.93}),
    ({"kind": "epoch", "lr": 0.001, "learning_rate": 0.001, "val_auc": 0.9}, {"lr": 0.001, "learning_rate": 0.001,
                                                                              "val_auc": 0.9}, {"val_auc": 0.9}),
    ({"kind": "final", "ok": True, "nan": math.nan, "name": "x", "classes": ["a"], "n": 3}, {"n": 3}, {"n": 3}),
    (None, {}, {}),
], ids=["resumed-epoch", "rates", "not-numbers", "none"])
def test_metric_and_curve_values(data, values, curves):
    assert metric_values(data) == values
    assert curve_values(data) == curves


def test_every_key_the_trainer_emits_is_bookkeeping_a_rate_or_a_metric(job, capsys):  # noqa: F811
    """Run the trainer's emitters (MetricsReporter, the evaluator) on tiny inputs and read their lines.
    ``final`` lines carry the user's own keys (write_metrics_json) and the trainer adds only kind."""
    import tensorflow as tf

    from multiworker.trainer._context import context
    from multiworker.trainer._evaluator import _Evaluator
    from multiworker.trainer._keras_callbacks import MetricsReporter

    reporter = MetricsReporter(global_batch_size=32, interval=0)
    reporter.set_params({"epochs": 2, "steps": 20, "verbose": 0})
    reporter.on_train_begin()
    reporter.on_epoch_begin(1)
    reporter.on_train_batch_begin(7)  # resumed mid-epoch: the backup was taken after step 7
    reporter.on_train_batch_end(7)
    reporter.on_epoch_end(1, {"loss": 0.5, "accuracy": 0.75})
    model = make_model()
    path = tf.train.Checkpoint(model=model).save(str(job / "ckpt"))
    _Evaluator(model, make_data(), 1, context()).evaluate(path)

    lines = metric_lines(capsys)
    assert [m["kind"] for m in lines] == ["progress", "epoch", "eval"]
    assert lines[1]["start_step"] == 7 and lines[1]["images_per_sec"] > 0
    for line in lines:
        metrics = {"loss", "accuracy"} if line["kind"] != "progress" else set()  # Keras logs / evaluate results
        assert set(line) - NOT_METRICS == metrics, line
        assert set(curve_values(line)) == metrics, line
