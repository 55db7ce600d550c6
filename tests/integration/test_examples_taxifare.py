"""Taxi-fare through `multiworker run`: MWMS, parameter servers and an evaluator, by job spec alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, mw, no_processes_left, status

pytestmark = pytest.mark.integration

TAXI = REPO / "examples" / "taxifare"
SHORT = ["--num_examples_to_train_on", "1920", "--num_evals", "2"]


def _run(spec: str, home: Path, tmp_path: Path, *args: str) -> tuple[dict, dict, Path]:
    hp_file = tmp_path / "hypertune" / "output.metrics"
    proc = mw("run", str(TAXI / spec), "-q", "--", *SHORT, *args, home=home,
              env={"CLOUD_ML_HP_METRIC_FILE": str(hp_file)})
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    doc = status(home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 0, doc
    metrics = json.loads((Path(doc["output_dir"]) / "metrics.json").read_text())
    return doc, metrics, hp_file


def test_two_workers_report_hypertune_lines_and_model_predicts(mw_home, tmp_path):
    doc, metrics, hp_file = _run("job.yaml", mw_home, tmp_path)
    assert metrics["strategy"] == "MultiWorkerMirroredStrategy" and metrics["workers"] == 2
    assert metrics["rmse"] > 0 and metrics["baseline_rmse"] > 0

    lines = [json.loads(line) for line in hp_file.read_text().splitlines()]
    assert len(lines) == 2  # one report per evaluation, from the chief only
    for step, line in zip((30, 60), lines):
        assert sorted(line) == ["global_step", "rmse", "timestamp", "trial"]
        assert line["global_step"] == str(step) and line["trial"] == "0"
        assert isinstance(line["rmse"], str) and float(line["rmse"]) > 0
        assert isinstance(line["timestamp"], float)

    import tensorflow as tf

    model = tf.saved_model.load(str(Path(doc["output_dir"]) / "model"))
    serve = model.signatures["serving_default"]
    trip = {
        "pickup_datetime": tf.constant([["2014-03-11 08:02:00 UTC"], ["2012-12-24 23:40:00 UTC"]]),
        "pickup_longitude": tf.constant([[-73.98], [-73.87]]), "pickup_latitude": tf.constant([[40.75], [40.77]]),
        "dropoff_longitude": tf.constant([[-73.96], [-73.99]]), "dropoff_latitude": tf.constant([[40.78], [40.73]]),
        "passenger_count": tf.constant([[1.0], [3.0]]),
    }
    (fare,) = serve(**trip).values()
    assert fare.shape == (2, 1) and bool(tf.reduce_all(tf.math.is_finite(fare)))


def test_parameter_server_variant_succeeds_and_stops_ps(mw_home, tmp_path):
    doc, metrics, _ = _run("job-ps.yaml", mw_home, tmp_path)
    assert metrics["strategy"] == "ParameterServerStrategy" and metrics["workers"] == 2
    replicas = {r["name"]: r for r in doc["replicas"]}
    assert sorted(replicas) == ["chief-0", "ps-0", "worker-0", "worker-1"]
    assert replicas["chief-0"]["state"] == "Succeeded"
    assert replicas["ps-0"]["state"] in ("Stopped", "Succeeded") and replicas["ps-0"]["exit_code"] == 0
    assert (Path(doc["output_dir"]) / "model" / "saved_model.pb").is_file()
    assert no_processes_left(doc["id"])


def test_evaluator_variant_records_final_evaluation(mw_home, tmp_path):
    doc, metrics, _ = _run("job-evaluator.yaml", mw_home, tmp_path)
    replicas = {r["name"]: r for r in doc["replicas"]}
    assert replicas["evaluator-0"]["state"] == "Succeeded" and replicas["evaluator-0"]["exit_code"] == 0
    out = Path(doc["output_dir"])
    final_checkpoint = json.loads((out / "TRAINING_DONE").read_text())["final_checkpoint"]
    evaluation = json.loads((out / "eval_metrics.json").read_text())
    assert evaluation["checkpoint"] == final_checkpoint and evaluation["epoch"] == 2
    assert evaluation["rmse"] == pytest.approx(metrics["rmse"], rel=1e-3)
    assert doc["eval_metrics"]["checkpoint"] == final_checkpoint
