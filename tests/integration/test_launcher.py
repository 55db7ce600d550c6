"""The local launcher with real processes (a fast stand-in trainer, no TensorFlow)."""

from __future__ import annotations

import json
import os
import signal

import pytest
from helpers import fake_spec, mw, mw_popen, no_processes_left, running_job, status

pytestmark = pytest.mark.integration


def test_restart_then_success(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{chief: {}, worker: {replicas: 2}}")
    proc = mw("run", str(spec), "--", "--epochs", "10", "--fail-replica", "worker-1", "--fail-attempts", "1", home=mw_home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    assert {(r["name"], r["state"], r["attempt"]) for r in doc["replicas"]} == {
        ("chief-0", "Succeeded", 1), ("worker-0", "Succeeded", 1), ("worker-1", "Succeeded", 1)}
    # each replica saw a TF_CONFIG naming itself, with fresh ports on the restart
    env_dir = os.path.join(doc["output_dir"], "env")
    first = json.load(open(os.path.join(env_dir, "worker-1.0.json")))
    second = json.load(open(os.path.join(env_dir, "worker-1.1.json")))
    assert json.loads(first["TF_CONFIG"])["task"] == {"type": "worker", "index": 1}
    assert second["MULTIWORKER_ATTEMPT"] == "1"
    assert "[worker-1] RuntimeError: injected failure" in proc.stdout


def test_failure_summary_names_the_replica(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}", "{restart_policy: OnFailure, backoff_limit: 1, backoff: 0.1}")
    proc = mw("run", str(spec), "-q", "--", "--epochs", "10", "--fail-replica", "worker-1", home=mw_home)
    assert proc.returncode == 1
    out = proc.stdout
    assert "Failed" in out and "root cause: worker-1" in out and "exit code 1" in out
    assert "RuntimeError: injected failure" in out and "worker-1.log" in out
    doc = status(mw_home)
    assert doc["state"] == "Failed" and doc["restarts"] == 1
    assert "root cause: worker-1" in doc["message"]
    assert {r["name"]: r["exit_code"] for r in doc["replicas"]}["worker-1"] == 1


def test_exitcode_policy_fails_fast_on_app_error(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}", "{restart_policy: ExitCode, backoff_limit: 3, backoff: 0.1}")
    proc = mw("run", str(spec), "-q", "--", "--fail-replica", "worker-0", "--fail-code", "3", home=mw_home)
    assert proc.returncode == 1
    assert status(mw_home)["restarts"] == 0


def test_injected_kill_restarts_group(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}")
    proc = mw("run", str(spec), "--inject-failure", "worker-1@epoch:1:KILL", "--", "--epochs", "4", home=mw_home)
    assert proc.returncode == 0, proc.stdout
    doc = status(mw_home)
    assert doc["restarts"] == 1 and doc["state"] == "Succeeded"
    assert "sent SIGKILL to worker-1" in proc.stdout
    assert "signal SIGKILL" in proc.stdout


def test_deadline_fails_job(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 1}}", "{active_deadline: 1s}")
    proc = mw("run", str(spec), "-q", "--", "--epochs", "100", home=mw_home)
    assert proc.returncode == 1
    doc = status(mw_home)
    assert doc["state"] == "Failed" and "active_deadline" in doc["message"]
    assert no_processes_left(doc["id"])


def test_ps_stopped_after_success(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{chief: {}, worker: {replicas: 2}, ps: {replicas: 1}}")
    proc = mw("run", str(spec), "-q", "--", "--serve-forever", home=mw_home)
    assert proc.returncode == 0, proc.stdout
    doc = status(mw_home)
    states = {r["name"]: r["state"] for r in doc["replicas"]}
    assert states == {"chief-0": "Succeeded", "worker-0": "Stopped", "worker-1": "Stopped", "ps-0": "Stopped"}
    assert no_processes_left(doc["id"])


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 130)], ids=["sigint", "sigterm"])
def test_signal_to_launcher_stops_everything(tmp_path, mw_home, sig, code):
    spec = fake_spec(tmp_path, "{chief: {}, worker: {replicas: 2}, ps: {}}")
    launcher = mw_popen("run", str(spec), "-q", "--", "--epochs", "1000", home=mw_home)
    job = running_job(mw_home)
    launcher.send_signal(sig)
    launcher.wait(timeout=300)
    assert launcher.returncode == code
    assert no_processes_left(job.id)
    doc = status(mw_home, job.id)
    assert doc["state"] == "Cancelled"


def test_sigkill_to_launcher_leaves_nothing(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}, evaluator: {}}")
    launcher = mw_popen("run", str(spec), "-q", "--", "--epochs", "1000", home=mw_home)
    job = running_job(mw_home)
    launcher.kill()
    launcher.wait(timeout=30)
    assert no_processes_left(job.id)


def test_grandchildren_die_with_a_killed_launcher(tmp_path, mw_home):
    """A `command` replica whose shell starts a child: the watchdog kills the grandchild too."""
    spec = tmp_path / "job.yaml"
    spec.write_text("name: shells\ncommand: [bash, -c, 'sleep 300 & sleep 300; wait']\npools: {worker: {replicas: 2}}\n")
    launcher = mw_popen("run", str(spec), "-q", home=mw_home)
    job = running_job(mw_home)
    from helpers import wait_for

    from multiworker.procs import processes_of_job

    wait_for(lambda: len(processes_of_job(job.id)) >= 6)  # 2 x (bash + 2 sleeps)
    launcher.kill()
    launcher.wait(timeout=30)
    assert no_processes_left(job.id)
