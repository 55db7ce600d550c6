"""A backend defined only in the test tree (tests/plugins/echo_backend: a package and the dist-info
that declares its entry point, nothing edited elsewhere) works end to end through the real CLI:
`run` and `tune` take its option as a flag or as --backend-opt, its help lists it, and `status`,
`logs` and `watch` read the jobs it ran; its flag without its backend, or misspelt, is refused."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers import PROGRAMS, mw

from multiworker.job import Store

pytestmark = pytest.mark.integration

PLUGIN = Path(__file__).resolve().parents[1] / "plugins" / "echo_backend"


@pytest.fixture
def echo(mw_home):
    """``multiworker ARGS`` with the echo backend's folder on PYTHONPATH (found by its entry point)."""
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(PLUGIN), os.environ.get("PYTHONPATH")]))}
    return lambda *args: mw(*args, home=mw_home, env=env, timeout=180)


def _job(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"name: echo\nmodule: fakejob\nworking_dir: {PROGRAMS}\npools:\n  worker: {{replicas: 2}}\n")
    return path


@pytest.mark.parametrize("option", [["--greeting", "hi"], ["--backend-opt", "greeting=hi"]], ids=["flag", "backend-opt"])
def test_run_status_logs_watch_through_a_plugin_backend(echo, mw_home, tmp_path, option):
    proc = echo("run", str(_job(tmp_path)), "--backend", "echo", *option, "--", "--epochs", "3", "--greeting", "x")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "the echo backend says hi" in proc.stdout
    job_id = proc.stdout.split("job ", 1)[1].split()[0]
    job = Store(mw_home).get_job(job_id)
    assert job.backend == "echo" and job.backend_options == {"greeting": "hi"}

    doc = json.loads(echo("status", job_id, "--json").stdout)
    assert doc["state"] == "Succeeded" and doc["backend"] == "echo"
    assert doc["trainer_args"] == ["--epochs", "3", "--greeting", "x"]  # after `--`: the trainer's, untouched
    assert [(r["name"], r["state"]) for r in doc["replicas"]] == [("worker-0", "Succeeded"), ("worker-1", "Succeeded")]
    assert doc["last_metrics"]["loss"] == 0.5

    logs = echo("logs", job_id)
    assert logs.returncode == 0, logs.stderr
    assert "[worker-1] hi from worker-1; args: --epochs 3 --greeting x" in logs.stdout

    watch = echo("watch", job_id)  # a finished job: drawn once, exits with its code
    assert watch.returncode == 0, watch.stderr
    assert "the echo backend says hi" in watch.stdout and "worker-1" in watch.stdout


def test_tune_runs_its_trials_on_a_plugin_backend(echo, mw_home, tmp_path):
    (tmp_path / "hp.yaml").write_text(
        "trainingInput:\n  hyperparameters:\n    goal: MINIMIZE\n    hyperparameterMetricTag: loss\n"
        "    maxTrials: 1\n    params:\n    - {parameterName: lr, type: DOUBLE, minValue: 0.001, maxValue: 0.1}\n")
    proc = echo("tune", str(_job(tmp_path)), "--config", str(tmp_path / "hp.yaml"), "--backend", "echo",
                "--greeting", "hi", "--seed", "1", "--study", "echo-study")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "trial 1 succeeded: loss 0.5" in proc.stdout
    trials = json.loads(echo("tune", "show", "echo-study", "--json").stdout)["trials"]
    assert [t["state"] for t in trials] == ["Succeeded"]
    job = Store(mw_home).get_job(trials[0]["job_id"])
    assert (job.backend, job.backend_options, job.run.study) == ("echo", {"greeting": "hi"}, "echo-study")
    assert "hi from worker-0; args: --lr=" in echo("logs", job.id).stdout


def test_its_help_and_its_refusals(echo, mw_home, tmp_path):
    for args in (["run", "--help"], ["tune", "run", "--help"]):
        text = echo(*args).stdout
        assert "echo:" in text and "--greeting TEXT" in text and "what every replica says first" in text

    job = str(_job(tmp_path))
    for command in (["run", job], ["tune", job, "--config", "hp.yaml"]):
        wrong = echo(*command, "--greeting", "hi")
        assert wrong.returncode == 2
        assert wrong.stderr == "error: --greeting: only the echo backend uses it; add --backend echo\n"

        typo = echo(*command, "--backend", "echo", "--greting", "hi")
        assert typo.returncode == 2
        assert typo.stderr == "error: --greting: no such option; did you mean --greeting?\n"
    assert Store(mw_home).list_jobs() == []  # refused before anything was recorded
