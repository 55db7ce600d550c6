"""Hang detection, stack dumps and STOP / CONT with real processes: the fake trainer (no
TensorFlow) for the mechanics, the MNIST example (two TensorFlow workers in a collective) for the
laggard."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import REPO, fake_spec, mw, mw_popen, no_processes_left, status, wait_for

from multiworker.job import Store

pytestmark = pytest.mark.integration
MNIST = str(REPO / "examples" / "mnist" / "job.yaml")


def _events(home: Path, job_id: str, reason: str) -> list[dict]:
    return [e for e in Store(home).events(job_id) if e["reason"] == reason]


def test_stop_then_cont_resumes_the_replica(mw_home, tmp_path):
    """The CONT is due at once but waits for the STOP (at worker-1's first epoch); the job then ends
    as usual, both replicas succeeding."""
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}")
    proc = mw("run", str(spec), "-q", "--inject-failure", "worker-1@0s:CONT", "--inject-failure",
              "worker-1@epoch:1:STOP", "--", "--epochs", "4", "--epoch-seconds", "0.3", home=mw_home)
    assert proc.returncode == 0, proc.stdout[-3000:]
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 0
    assert [r["state"] for r in doc["replicas"]] == ["Succeeded", "Succeeded"]
    sent = [e["message"] for e in _events(mw_home, doc["id"], "InjectedFailure")]
    assert ["sent SIGSTOP" in m for m in sent] == [True, False] and "sent SIGCONT" in sent[1], sent


def test_a_stopped_group_is_hung_dumped_and_restarted(mw_home, tmp_path):
    """Every replica stopped: no output for the hang timeout, both stacks read from the stopped
    processes, the group restarted (the injection fires once), and `stacks` shows the saved dump."""
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}", run_policy="{backoff: 0.1, hang_timeout: 3s}")
    proc = mw("run", str(spec), "-q", "--inject-failure", "worker-*@epoch:1:STOP", "--",
              "--epochs", "3", "--epoch-seconds", "0.3", home=mw_home)
    assert proc.returncode == 0, proc.stdout[-3000:]
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    (hung,) = _events(mw_home, doc["id"], "Hung")
    quiet = float(re.search(r"advanced for ([\d.]+)s", hung["message"]).group(1))
    assert quiet >= 3 and "stacks of 2/2 replicas" in hung["message"], hung["message"]
    shown = mw("stacks", doc["id"], home=mw_home)
    assert shown.returncode == 0, shown.stderr
    for replica in ("worker-0", "worker-1"):
        assert re.search(rf"== {replica} \(pid \d+, stopped", shown.stdout), shown.stdout
    assert shown.stdout.count('"MainThread"') == 2 and "fakejob.py" in shown.stdout
    assert no_processes_left(doc["id"])


def test_mnist_worker_stopped_in_the_collective_is_the_laggard(mw_home):
    """worker-1 frozen once epoch 1 (40 steps) is done, inside epoch 2 on any machine: while it runs `stacks` shows both replicas
    live; then `Hung` names worker-1, both stacks are saved (the frozen one and worker-0 waiting for
    it inside TensorFlow), the group restarts and the job succeeds."""
    launcher = mw_popen("run", MNIST, "-q", "--set", "run_policy.hang_timeout=20s", "--set", "run_policy.backoff=1s",
                        "--inject-failure", "worker-1@epoch:1:STOP", "--", "--epochs", "2", "--steps-per-epoch", "40",
                        home=mw_home)
    try:
        job_id = wait_for(lambda: (jobs := Store(mw_home).list_jobs()) and jobs[0].id, timeout=300)
        # worker-1 is stopped: the group stays up, waiting, for the 20 s hang timeout
        wait_for(lambda: _events(mw_home, job_id, "InjectedFailure"), timeout=300, interval=0.2)
        live = mw("stacks", job_id, home=mw_home, timeout=300)
        assert live.returncode == 0, live.stderr
        assert "== worker-0 (pid" in live.stdout and "== worker-1 (pid" in live.stdout, live.stdout[-2000:]
        out, _ = launcher.communicate(timeout=600)
    finally:
        if launcher.poll() is None:
            launcher.kill()
    assert launcher.returncode == 0, out[-3000:]
    doc = status(mw_home, job_id)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    (hung,) = _events(mw_home, job_id, "Hung")
    assert hung["replica"] == "worker-1" and "laggard worker-1: its process is stopped" in hung["message"]
    folder = Path(re.search(r"replicas in (\S+)", hung["message"]).group(1))
    stopped, waiting = (folder / "worker-1.txt").read_text(), (folder / "worker-0.txt").read_text()
    assert "stopped" in stopped.splitlines()[0] and '"MainThread"' in stopped
    assert "stopped" not in waiting.splitlines()[0] and '"MainThread"' in waiting, waiting
    shown = mw("stacks", job_id, "--brief", home=mw_home)
    assert shown.returncode == 0 and "laggard: worker-1" in shown.stdout and str(folder) in shown.stdout
    resumed = _events(mw_home, job_id, "Resumed")
    assert resumed and "after a hang in attempt 0" in resumed[0]["message"]
    assert no_processes_left(job_id)
