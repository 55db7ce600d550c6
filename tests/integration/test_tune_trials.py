"""`multiworker tune` with a stand-in trainer (real 2-worker jobs, no TensorFlow): an interrupted
study resumes and runs only the rest; a Vertex AI tuning job runs as is (grid search, early
stopping); trials that fail or report nothing are recorded as failed with the reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PROGRAMS, mw, no_processes_left, wait_for

from multiworker.job import Store

pytestmark = pytest.mark.integration

HP = """
trainingInput:
  hyperparameters:
    goal: MINIMIZE
    hyperparameterMetricTag: loss
    maxTrials: 4
    maxParallelTrials: 1
    params:
    - {parameterName: lr, type: DOUBLE, minValue: 0.0001, maxValue: 1.0, scaleType: UNIT_LOG_SCALE}
    - {parameterName: layers, type: INTEGER, minValue: 1, maxValue: 5}
    - {parameterName: act, type: CATEGORICAL, categoricalValues: [tanh, relu]}
"""


def _job(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"name: fake\nmodule: hptrainer\nworking_dir: {PROGRAMS}\npools:\n  worker: {{replicas: 2}}\n"
                    "run_policy: {restart_policy: Never}\n")
    (tmp_path / "hp.yaml").write_text(HP)
    return path


def _show(home: Path, study: str) -> dict:
    proc = mw("tune", "show", study, "--json", home=home)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_interrupted_study_resumes_with_only_the_rest(mw_home, tmp_path):
    job = _job(tmp_path)
    env = {**os.environ, "MULTIWORKER_HOME": str(mw_home)}
    cmd = [sys.executable, "-m", "multiworker", "tune", str(job), "--config", str(tmp_path / "hp.yaml"), "--seed", "3",
           "--", "--steps", "3", "--hold-trial", "3"]  # trial 3 runs until the SIGINT, however slow the machine
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("trial 3 started"):
                job_id = line.split("job ")[1].split()[0]
                wait_for(lambda job_id=job_id: Store(mw_home).get_job(job_id).state == "Running", timeout=300)
                proc.send_signal(signal.SIGINT)
                break
        out = "".join(seen) + proc.stdout.read()
        assert proc.wait(timeout=300) == 130, out
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "trial 3 interrupted" in out
    doc = _show(mw_home, "fake")
    # The cut-off trial is recorded Interrupted, its parameters queued to run again.
    assert [t["state"] for t in doc["trials"]] == ["Succeeded", "Succeeded", "Interrupted", "Queued"]
    cut = doc["trials"][2]
    assert doc["trials"][3]["values"] == cut["values"]
    assert json.loads(mw("status", cut["job_id"], "--json", home=mw_home).stdout)["state"] == "Cancelled"
    assert no_processes_left(cut["job_id"])

    resumed = mw("tune", str(job), "--config", str(tmp_path / "hp.yaml"), "--resume", "--",
                 "--steps", "2", "--step-seconds", "0.1", home=mw_home)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "2 of 4 trial(s) done" in resumed.stdout
    doc = _show(mw_home, "fake")
    states = [t["state"] for t in doc["trials"]]
    assert states == ["Succeeded", "Succeeded", "Interrupted", "Succeeded", "Succeeded"]  # only the rest ran
    rerun = doc["trials"][3]
    assert rerun["rerun_of"] == 3 and rerun["values"] == cut["values"]  # the cut-off point, run again
    assert "trial 1 started" not in resumed.stdout and "trial 4 started (rerun of trial 3)" in resumed.stdout
    done = [t for t in doc["trials"] if t["state"] == "Succeeded"]
    assert doc["best"]["trial"] == min(done, key=lambda t: t["metric"])["trial"]


VERTEX = """
displayName: fake-grid
maxTrialCount: 6
parallelTrialCount: 1
studySpec:
  metrics: [{{metricId: loss, goal: MINIMIZE}}]
  algorithm: GRID_SEARCH
  medianAutomatedStoppingSpec: {{}}
  parameters:
  - parameterId: lr
    discreteValueSpec: {{values: [0.00001, 0.000011, 0.01, 0.0101]}}
  - parameterId: act
    categoricalValueSpec: {{values: [tanh]}}
trialJobSpec:
  workerPoolSpecs:
  - replicaCount: 1
    containerSpec: {{imageUri: gcr.io/p/fake:v1, args: [--steps=5, --step-seconds=0.3]}}
  - replicaCount: 1
    containerSpec: {{imageUri: gcr.io/p/fake:v1, args: [--steps=5, --step-seconds=0.3]}}
"""


def test_vertex_tuning_job_grid_search_with_early_stopping(mw_home, tmp_path):
    path = tmp_path / "vertex-hp-job.yaml"
    path.write_text(VERTEX.format())
    proc = mw("tune", str(path), "--seed", "1", "--image", f"gcr.io/p/fake=python {PROGRAMS / 'hptrainer.py'}",
              home=mw_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "GRID_SEARCH tried every point" in proc.stdout
    doc = _show(mw_home, "fake-grid")
    trials = doc["trials"]
    assert sorted(t["values"]["lr"] for t in trials) == [0.00001, 0.000011, 0.01, 0.0101]  # each point once
    done = 0
    for t in trials:
        bad = t["values"]["lr"] < 0.001  # loss about 9 against about 0.2
        if bad and done >= 2:  # the median pruner starts after two finished trials
            assert t["state"] == "Stopped early" and t["steps"] < 5, t
        else:
            assert t["state"] == "Succeeded", t
        done += t["state"] == "Succeeded"
    assert any(t["state"] == "Stopped early" for t in trials)
    assert doc["best"]["values"]["lr"] in (0.01, 0.0101)
    status = json.loads(mw("status", trials[0]["job_id"], "--json", home=mw_home).stdout)
    assert sorted(r["name"] for r in status["replicas"]) == ["chief-0", "worker-0"]


def test_failed_and_silent_trials_are_failed_with_the_reason(mw_home, tmp_path):
    job = _job(tmp_path)
    proc = mw("tune", str(job), "--config", str(tmp_path / "hp.yaml"), "--max-trials", "2", "--parallel", "2",
              "--", "--no-report", "--steps", "1", "--step-seconds", "0", home=mw_home)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no 'loss' report in" in proc.stdout and "report_hyperparameter_tuning_metric" in proc.stdout
    assert "no trial succeeded" in proc.stdout
    assert [t["state"] for t in _show(mw_home, "fake")["trials"]] == ["Failed"] * 2


def test_a_trial_accepts_only_its_own_reports_in_a_private_file(mw_home, tmp_path):
    job = _job(tmp_path)
    proc = mw("tune", str(job), "--config", str(tmp_path / "hp.yaml"), "--max-trials", "1",
              "--", "--claim-trial", "99", "--steps", "1", "--step-seconds", "0", home=mw_home)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "no 'loss' report in" in proc.stdout
    trial = _show(mw_home, "fake")["trials"][0]
    assert trial["state"] == "Failed"
    metric_file = Path(mw_home) / "studies" / "fake" / "trial-1" / "hypertune.metrics"
    assert '"trial": "99"' in metric_file.read_text()  # written, and refused
    assert metric_file.stat().st_mode & 0o777 == 0o600
    assert metric_file.parent.stat().st_mode & 0o777 == 0o700
    assert (Path(mw_home) / "studies" / "studies.db").stat().st_mode & 0o777 == 0o600
