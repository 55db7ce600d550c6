"""Tuning configs: AI Platform's hyperparameters and Vertex AI's studySpec read into one Study,
written back in either form, and every reader error is one line naming the field and the fix."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from multiworker.errors import SpecError
from multiworker.tune import read_config
from multiworker.tune.config import parse_config
from multiworker.tune.convert import convert_config
from multiworker.tune.model import Param, Study

REPO = Path(__file__).resolve().parents[2]
TAXI = REPO / "examples" / "taxifare"

AIPLATFORM = {"trainingInput": {"hyperparameters": {
    "goal": "MINIMIZE", "hyperparameterMetricTag": "rmse", "maxTrials": 8, "maxParallelTrials": 2,
    "maxFailedTrials": 3, "enableTrialEarlyStopping": True, "algorithm": "RANDOM_SEARCH",
    "params": [
        {"parameterName": "lr", "type": "DOUBLE", "minValue": 1e-4, "maxValue": 0.1, "scaleType": "UNIT_LOG_SCALE"},
        {"parameterName": "nbuckets", "type": "INTEGER", "minValue": 5, "maxValue": 20,
         "scaleType": "UNIT_REVERSE_LOG_SCALE"},
        {"parameterName": "nnsize", "type": "CATEGORICAL", "categoricalValues": ["32 8", "64 16"]},
        {"parameterName": "batch_size", "type": "DISCRETE", "discreteValues": [16, 32, 64]},
    ]}}}
VERTEX = {
    "displayName": "taxi", "maxTrialCount": 8, "parallelTrialCount": 2, "maxFailedTrialCount": 3,
    "studySpec": {
        "metrics": [{"metricId": "rmse", "goal": "MINIMIZE"}],
        "algorithm": "RANDOM_SEARCH",
        "medianAutomatedStoppingSpec": {},
        "parameters": [
            {"parameterId": "lr", "doubleValueSpec": {"minValue": 1e-4, "maxValue": 0.1}, "scaleType": "UNIT_LOG_SCALE"},
            {"parameterId": "nbuckets", "integerValueSpec": {"minValue": "5", "maxValue": "20"},  # int64 as JSON strings
             "scaleType": "UNIT_REVERSE_LOG_SCALE"},
            {"parameterId": "nnsize", "categoricalValueSpec": {"values": ["32 8", "64 16"]}},
            {"parameterId": "batch_size", "discreteValueSpec": {"values": [16, 32, 64]}},
        ]}}
EXPECTED = Study(
    metric="rmse", goal="MINIMIZE", max_trials=8, parallel_trials=2, max_failed_trials=3, algorithm="RANDOM_SEARCH",
    early_stopping=True, params=(
        Param(name="lr", type="DOUBLE", min_value=1e-4, max_value=0.1, scale="UNIT_LOG_SCALE"),
        Param(name="nbuckets", type="INTEGER", min_value=5.0, max_value=20.0, scale="UNIT_REVERSE_LOG_SCALE"),
        Param(name="nnsize", type="CATEGORICAL", values=("32 8", "64 16")),
        Param(name="batch_size", type="DISCRETE", values=(16.0, 32.0, 64.0)),
    ))


def _parse(data, name="cfg.yaml"):
    return parse_config(data, path=Path(name))


def test_both_forms_parse_to_the_same_study():
    assert _parse(AIPLATFORM).study == EXPECTED
    assert _parse(VERTEX).study == EXPECTED
    snake = {"study_spec": {"metrics": [{"metric_id": "rmse", "goal": "MINIMIZE"}], "algorithm": "RANDOM_SEARCH",
                            "median_automated_stopping_spec": {},
                            "parameters": [{"parameter_id": p["parameterId"], **{
                                "scale_type" if k == "scaleType" else
                                {"doubleValueSpec": "double_value_spec", "integerValueSpec": "integer_value_spec",
                                 "categoricalValueSpec": "categorical_value_spec",
                                 "discreteValueSpec": "discrete_value_spec"}[k]:
                                ({"min_value": v["minValue"], "max_value": v["maxValue"]} if "minValue" in v else v)
                                if isinstance(v, dict) else v
                                for k, v in p.items() if k != "parameterId"}} for p in VERTEX["studySpec"]["parameters"]]},
             "max_trial_count": 8, "parallel_trial_count": 2, "max_failed_trial_count": 3}
    assert _parse(snake).study == EXPECTED


def test_the_examples_hold_one_study_in_two_forms():
    aip, vertex = read_config(TAXI / "hptuning.yaml"), read_config(TAXI / "vertex-hp-job.yaml")
    assert aip.study == vertex.study
    assert aip.study.metric == "rmse" and aip.study.goal == "MINIMIZE" and len(aip.study.params) == 3
    assert aip.job is None and aip.form == "aiplatform"  # tuning only: the job comes from job.yaml
    assert vertex.job.format == "vertex" and "workerPoolSpecs" in vertex.job.data and vertex.name == "taxifare-hptuning"


def test_defaults_are_the_clouds():
    study = _parse({"trainingInput": {"hyperparameters": {"params": [
        {"parameterName": "lr", "type": "DOUBLE", "minValue": 0.1, "maxValue": 1}]}}}).study
    assert (study.goal, study.metric, study.max_trials, study.parallel_trials, study.algorithm, study.measurement) == (
        "MAXIMIZE", "training/hptuning/metric", 1, 1, "ALGORITHM_UNSPECIFIED", "LAST_MEASUREMENT")
    bayes = {"hyperparameters": {"algorithm": "BAYESIAN_OPTIMIZATION", "params": [
        {"parameterName": "lr", "type": "DOUBLE", "minValue": 0.1, "maxValue": 1}]}}
    assert _parse(bayes).study.algorithm == "ALGORITHM_UNSPECIFIED"


@pytest.mark.parametrize("to", ["vertex", "aiplatform"])
@pytest.mark.parametrize("start", [AIPLATFORM, VERTEX], ids=["from-aiplatform", "from-vertex"])
def test_convert_round_trips(start, to):
    doc, notes = convert_config(_parse(start), to)
    assert _parse(doc).study == EXPECTED
    assert ("studySpec" in doc) == (to == "vertex")


def test_convert_refuses_what_aiplatform_cannot_hold():
    data = json.loads(json.dumps(VERTEX))
    data["studySpec"]["measurementSelectionType"] = "BEST_MEASUREMENT"
    with pytest.raises(SpecError, match=r"measurementSelectionType: is BEST_MEASUREMENT; .* --allow-loss"):
        convert_config(_parse(data), "aiplatform")
    doc, notes = convert_config(_parse(data), "aiplatform", allow_loss=True)
    assert "hyperparameters" in doc["trainingInput"] and any("BEST_MEASUREMENT" in n for n in notes)


def test_convert_writes_the_trial_job_in_the_target_form():
    vertex = read_config(TAXI / "vertex-hp-job.yaml")
    doc, _ = convert_config(read_config(TAXI / "hptuning.yaml"), "vertex",
                            job=type(vertex.job)(path=TAXI / "job-ps.yaml"), image="gcr.io/p/taxi:1",
                            allow_loss=True)
    pools = doc["trialJobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 2, 1]  # chief, 2 workers, 1 ps
    assert _parse(doc).study == read_config(TAXI / "hptuning.yaml").study


BASE = {"goal": "MINIMIZE", "hyperparameterMetricTag": "rmse", "params": [
    {"parameterName": "lr", "type": "DOUBLE", "minValue": 0.001, "maxValue": 0.1}]}


def _aip(**change):
    spec = json.loads(json.dumps(BASE))
    param = change.pop("param", {})
    spec["params"][0].update(param)
    spec["params"][0] = {k: v for k, v in spec["params"][0].items() if v is not None}
    spec.update(change)
    return {"trainingInput": {"hyperparameters": spec}}


def _vertex(param: dict, **study):
    return {"studySpec": {"metrics": [{"metricId": "rmse", "goal": "MINIMIZE"}], "parameters": [param], **study}}


P = "trainingInput.hyperparameters"
ERRORS = [
    ("unknown-key", _aip(hyperparameterMetricTg="rmse"),
     rf"{P}.hyperparameterMetricTg: unknown key .*did you mean `hyperparameterMetricTag`"),
    ("bad-type", _aip(param={"type": "DUBLE"}), rf"{P}.params\[0\].type: 'DUBLE' is not allowed; did you mean DOUBLE"),
    ("bad-goal", _aip(goal="MINIMISE"), rf"{P}.goal: 'MINIMISE' is not allowed; did you mean MINIMIZE"),
    ("min-not-below-max", _aip(param={"minValue": 0.5, "maxValue": 0.1}), rf"{P}.params\[0\].maxValue: is 0.1, not above"),
    ("missing-max", _aip(param={"maxValue": None}), rf"{P}.params\[0\].maxValue: is required for a DOUBLE"),
    ("log-needs-positive", _aip(param={"minValue": 0, "scaleType": "UNIT_LOG_SCALE"}),
     rf"{P}.params\[0\].minValue: is 0.*strictly positive"),
    ("integer-whole", _aip(param={"type": "INTEGER", "minValue": 1.5, "maxValue": 4}),
     rf"{P}.params\[0\].minValue: is 1.5; an INTEGER parameter needs whole numbers"),
    ("categorical-values", _aip(param={"type": "CATEGORICAL", "minValue": None, "maxValue": None}),
     rf"{P}.params\[0\].categoricalValues: is required for a CATEGORICAL parameter"),
    ("discrete-order", _aip(param={"type": "DISCRETE", "minValue": None, "maxValue": None, "discreteValues": [4, 2]}),
     rf"{P}.params\[0\].discreteValues: \[4.0, 2.0\] is not strictly increasing"),
    ("flag-name", _aip(param={"parameterName": "learning rate"}), rf"{P}.params\[0\].parameterName: 'learning rate' cannot"),
    ("duplicate", {"trainingInput": {"hyperparameters": {**BASE, "params": BASE["params"] * 2}}},
     rf"{P}.params: names 'lr' twice"),
    ("grid-double", _aip(algorithm="GRID_SEARCH"), rf"{P}.algorithm: GRID_SEARCH needs INTEGER, CATEGORICAL or DISCRETE"),
    ("zero-trials", _aip(maxTrials=0), rf"{P}.maxTrials: is 0; run at least 1 trial"),
    ("no-hyperparameters", {"trainingInput": {"scaleTier": "BASIC"}}, r"trainingInput: has no hyperparameters"),
    ("not-tuning", {"name": "job", "pools": {}}, r"not a tuning config: expected trainingInput.hyperparameters"),
    ("near-marker", {"studySpecs": {}}, r"studySpecs: unknown key `studySpecs`; did you mean `studySpec`"),
    ("double-overflow", _aip(param={"minValue": -1e308, "maxValue": 1e308}),
     rf"{P}.params\[0\].minValue: is -1e\+308; a DOUBLE bound must lie between -1e\+300 and 1e\+300"),
    ("integer-huge", _aip(param={"type": "INTEGER", "minValue": 0, "maxValue": 10**30}),
     rf"{P}.params\[0\].maxValue: is 1e\+30; an? INTEGER bound must lie between"),
    ("huge-grid", _aip(algorithm="GRID_SEARCH", param={"type": "INTEGER", "minValue": 0, "maxValue": 2**52}),
     rf"{P}.algorithm: the grid has 4,503,599,627,370,497 points; GRID_SEARCH takes at most 100,000"),
    ("many-param-grid", {"trainingInput": {"hyperparameters": {**BASE, "algorithm": "GRID_SEARCH", "params": [
        {"parameterName": f"p{i}", "type": "INTEGER", "minValue": 1, "maxValue": 10} for i in range(8)]}}},
     rf"{P}.algorithm: the grid has 100,000,000 points"),
    ("too-many-params", {"trainingInput": {"hyperparameters": {**BASE, "params": [
        {"parameterName": f"p{i}", "type": "DOUBLE", "minValue": 0, "maxValue": 1} for i in range(101)]}}},
     rf"{P}.params: lists 101 parameters; at most 100"),
    ("discrete-nan", _aip(param={"type": "DISCRETE", "minValue": None, "maxValue": None,
                                 "discreteValues": [1, float("nan")]}),
     rf"{P}.params\[0\].discreteValues: holds nan; give finite numbers"),
    ("discrete-inf", _aip(param={"type": "DISCRETE", "minValue": None, "maxValue": None,
                                 "discreteValues": [1, float("inf")]}),
     rf"{P}.params\[0\].discreteValues: holds inf; give finite numbers"),
    ("categorical-nul", _aip(param={"type": "CATEGORICAL", "minValue": None, "maxValue": None,
                                    "categoricalValues": ["relu", "re\x00lu"]}),
     rf"{P}.params\[0\].categoricalValues: 're\\x00lu' holds a NUL character"),
    ("categorical-many", _aip(param={"type": "CATEGORICAL", "minValue": None, "maxValue": None,
                                     "categoricalValues": [str(i) for i in range(10_001)]}),
     rf"{P}.params\[0\].categoricalValues: has 10001 values; at most 10000"),
    ("vertex-two-specs", _vertex({"parameterId": "lr", "doubleValueSpec": {"minValue": 0.1, "maxValue": 1},
                                  "discreteValueSpec": {"values": [1]}}),
     r"studySpec.parameters\[0\]: has 2 value specs; give exactly one of doubleValueSpec"),
    ("vertex-no-spec", _vertex({"parameterId": "lr"}), r"studySpec.parameters\[0\]: has no value spec"),
    ("vertex-two-metrics", {"studySpec": {"metrics": [{"metricId": "a"}, {"metricId": "b"}], "parameters": []}},
     r"studySpec.metrics: has 2 metrics; a local study optimizes exactly one"),
    ("vertex-unknown", _vertex({"parameterId": "lr", "doubleValueSpec": {"minValue": 0.1, "maxValu": 1}}),
     r"studySpec.parameters\[0\].doubleValueSpec.maxValu: unknown key `maxValu`; did you mean `maxValue`"),
    ("vertex-conditional", _vertex({"parameterId": "lr", "doubleValueSpec": {"minValue": 0.1, "maxValue": 1},
                                    "conditionalParameterSpecs": [{}]}),
     r"studySpec.parameters\[0\].conditionalParameterSpecs: conditional parameters are not supported locally"),
    ("vertex-convex", _vertex({"parameterId": "lr", "doubleValueSpec": {"minValue": 0.1, "maxValue": 1}},
                              convexAutomatedStoppingSpec={}),
     r"studySpec.convexAutomatedStoppingSpec: is not supported locally; use medianAutomatedStoppingSpec"),
    ("vertex-measurement", _vertex({"parameterId": "lr", "doubleValueSpec": {"minValue": 0.1, "maxValue": 1}},
                                   measurementSelectionType="LAST"),
     r"studySpec.measurementSelectionType: 'LAST' is not allowed; did you mean LAST_MEASUREMENT"),
]


@pytest.mark.parametrize("data,match", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_reader_errors_name_the_field_and_the_fix(data, match):
    with pytest.raises(SpecError, match=r"^cfg\.yaml: " + match) as info:
        _parse(data)
    assert "\n" not in str(info.value)


def test_cli_error_is_one_line_exit_2(tmp_path):
    path = tmp_path / "hp.yaml"
    path.write_text(yaml.safe_dump(_aip(param={"type": "DUBLE"})))
    proc = subprocess.run([sys.executable, "-m", "multiworker", "tune", str(TAXI / "job.yaml"), "--config", str(path)],
                          capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {path}: {P}.params[0].type: 'DUBLE' is not allowed; did you mean DOUBLE?"]


def test_cli_convert_writes_vertex_form(tmp_path):
    out = tmp_path / "vertex.yaml"
    proc = subprocess.run([sys.executable, "-m", "multiworker", "tune", "convert", str(TAXI / "hptuning.yaml"),
                           "--to", "vertex", "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert read_config(out).study == read_config(TAXI / "hptuning.yaml").study
