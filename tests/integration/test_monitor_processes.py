"""Monitoring real jobs from other processes: detached runs, status, logs --follow, describe,
Lost after a SIGKILLed supervisor, cancel/delete, watch, plot, concurrent jobs, TensorBoard."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from helpers import REPO, fake_spec, mw, no_processes_left, status, wait_for

from multiworker.procs import free_ports, pid_alive

pytestmark = pytest.mark.integration

MNIST = str(REPO / "examples" / "mnist" / "job.yaml")


def detach(home: Path, spec: Path, *args: str) -> str:
    """``run --detach``: the job id, once the launcher has returned."""
    proc = mw("run", str(spec), "--detach", *args, home=home, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip().splitlines()[-1]


def mw_bg(home: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "MULTIWORKER_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "multiworker", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)


def test_detached_mnist_status_running_then_succeeded(mw_home):
    job_id = detach(mw_home, Path(MNIST), "--", "--epochs", "2", "--steps-per-epoch", "10")
    seen = [status(mw_home, job_id)["state"]]
    wait_for(lambda: seen.append(status(mw_home, job_id)["state"]) or seen[-1] in ("Succeeded", "Failed"),
             timeout=400, interval=0.5)
    assert "Running" in seen, seen
    assert seen[-1] == "Succeeded", (seen, mw("logs", job_id, "--tail", "20", home=mw_home).stdout)
    doc = status(mw_home, job_id)
    assert (doc["epoch"], doc["epochs"], doc["restarts"]) == (2, 2, 0)
    assert doc["last_metrics"]["loss"] > 0 and "accuracy" in doc["last_metrics"]
    assert [r["state"] for r in doc["replicas"]] == ["Succeeded", "Succeeded"]
    assert no_processes_left(job_id)
    # the store saw per-replica resource samples during the run
    from multiworker.job import Store

    assert {s["replica"] for s in Store(mw_home).samples(job_id)} == {"worker-0", "worker-1"}


def test_logs_replica_and_follow_across_a_restart_end_with_the_job(tmp_path, mw_home):
    # the back-off gives the follower time to start before attempt 1 does
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}", "{backoff: 3}")
    job_id = detach(mw_home, spec, "--", "--epochs", "4", "--epoch-seconds", "0.5",
                    "--fail-replica", "worker-1", "--fail-attempts", "1")
    follower = mw_bg(mw_home, "logs", job_id, "--replica", "worker-1", "--follow")
    out, err = follower.communicate(timeout=600)
    assert follower.returncode == 0, err
    assert status(mw_home, job_id)["state"] == "Succeeded"  # it ended with the job
    lines = out.splitlines()
    assert "hello from worker-1 attempt 0" in lines and "hello from worker-1 attempt 1" in lines
    assert "RuntimeError: injected failure" in lines
    assert not any("worker-0" in line for line in lines) and "attempt 1" in err
    # without --follow: the latest attempt only; --attempt picks an older one
    latest = mw("logs", job_id, "--replica", "worker-1", home=mw_home).stdout.splitlines()
    assert latest[0] == "hello from worker-1 attempt 1" and "RuntimeError: injected failure" not in latest
    first = mw("logs", job_id, "-r", "worker-1", "--attempt", "0", "--tail", "1", home=mw_home).stdout
    assert first.strip() == "RuntimeError: injected failure"
    both = mw("logs", job_id, home=mw_home).stdout
    assert "[worker-0] hello from worker-0 attempt 1" in both and "[worker-1] hello from worker-1 attempt 1" in both


def test_describe_shows_restarting_and_injected_failure(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}")
    proc = mw("run", str(spec), "-q", "--inject-failure", "worker-1@epoch:1:KILL", "--", "--epochs", "4", home=mw_home)
    assert proc.returncode == 0, proc.stdout
    doc = json.loads(mw("describe", "last", "--json", home=mw_home).stdout)
    reasons = [e["reason"] for e in doc["events"]]
    assert reasons.index("InjectedFailure") < reasons.index("Restarting") < reasons.index("Succeeded")
    assert [a["outcome"] for a in doc["attempts"]] == ["Restarting", "Succeeded"]
    text = mw("describe", "last", home=mw_home).stdout
    assert "InjectedFailure" in text and "Restarting" in text and "sent SIGKILL to worker-1" in text


def test_sigkilled_supervisor_is_lost_and_leaves_no_replica(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{chief: {}, worker: {replicas: 2}}")
    job_id = detach(mw_home, spec, "--", "--epochs", "1000", "--epoch-seconds", "0.5")
    doc = wait_for(lambda: (d := status(mw_home, job_id))["state"] == "Running" and len(d["replicas"]) == 3
                   and all(r["state"] == "Running" for r in d["replicas"]) and d)
    pids = [r["pid"] for r in doc["replicas"]]
    os.kill(doc["supervisor_pid"], signal.SIGKILL)
    wait_for(lambda: not pid_alive(doc["supervisor_pid"]), timeout=300)
    after = status(mw_home, job_id)  # the next command that reads it
    assert after["state"] == "Lost", after
    assert "is gone" in after["message"] and {r["state"] for r in after["replicas"]} == {"Lost"}
    events = json.loads(mw("describe", job_id, "--json", home=mw_home).stdout)["events"]
    assert [e["reason"] for e in events].count("Lost") == 1
    assert no_processes_left(job_id) and not any(pid_alive(p) for p in pids)
    rows = json.loads(mw("list", "--json", home=mw_home).stdout)
    assert rows[0]["state"] == "Lost"


def test_cancel_then_delete_a_detached_job(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}", "{grace_period: 2}")
    job_id = detach(mw_home, spec, "--", "--epochs", "1000")
    wait_for(lambda: status(mw_home, job_id)["state"] == "Running")
    refused = mw("delete", job_id, home=mw_home)
    assert refused.returncode == 2 and "cancel it first" in refused.stderr
    cancelled = mw("cancel", job_id[:4], "--json", home=mw_home)
    assert json.loads(cancelled.stdout)[0]["state"] == "Cancelled"
    doc = status(mw_home, job_id)
    assert doc["state"] == "Cancelled" and {r["state"] for r in doc["replicas"]} == {"Stopped"}
    assert no_processes_left(job_id)
    assert "already" in mw("cancel", job_id, home=mw_home).stdout
    job_dir = Path(doc["job_dir"])
    assert mw("delete", job_id, home=mw_home).returncode == 0 and not job_dir.exists()
    assert mw("status", job_id, home=mw_home).returncode == 2


def test_watch_exits_when_the_job_ends(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}")
    job_id = detach(mw_home, spec, "--", "--epochs", "4", "--epoch-seconds", "0.4")
    watcher = mw_bg(mw_home, "watch", job_id, "--interval", "0.2")
    out, err = watcher.communicate(timeout=600)
    assert watcher.returncode == 0, err
    assert "Succeeded" in out and "worker-1" in out and "4/4" in out


def test_two_concurrent_jobs_both_succeed(tmp_path, mw_home):
    specs = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        specs.append(fake_spec(tmp_path / name, "{chief: {}, worker: {replicas: 2}}", name=name))
    ids = [detach(mw_home, spec, "--", "--epochs", "5", "--epoch-seconds", "0.3") for spec in specs]
    wait_for(lambda: all(status(mw_home, j)["state"] in ("Succeeded", "Failed") for j in ids), timeout=600)
    docs = [status(mw_home, j) for j in ids]
    assert [d["state"] for d in docs] == ["Succeeded", "Succeeded"]
    ports = [{r["port"] for r in d["replicas"]} for d in docs]
    assert len(ports[0] | ports[1]) == 6
    assert docs[0]["output_dir"] != docs[1]["output_dir"] and docs[0]["job_dir"] != docs[1]["job_dir"]
    env0 = json.loads((Path(docs[0]["output_dir"]) / "env" / "worker-0.0.json").read_text())
    assert env0["MULTIWORKER_JOB_ID"] == ids[0]


def test_plot_a_real_run(tmp_path, mw_home):
    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}")
    assert mw("run", str(spec), "-q", "--", "--epochs", "3", "--epoch-seconds", "0.8", home=mw_home).returncode == 0
    proc = mw("plot", "last", "-o", str(tmp_path / "job.png"), "--json", home=mw_home)
    assert proc.returncode == 0, proc.stderr
    drawn = json.loads(proc.stdout)["drawn"]
    loss = drawn["Loss per epoch"]
    assert loss["loss (worker-0)"] == [[1.0, 1.0], [2.0, 0.5], [3.0, pytest.approx(1 / 3)]]
    assert set(drawn["CPU per replica"]) == {"worker-0", "worker-1"}
    assert all(len(points) >= 1 and points[0][1] > 1.0 for points in drawn["Memory per replica"].values())
    assert (tmp_path / "job.png").read_bytes()[:4] == b"\x89PNG"


def test_tensorboard_serves_the_job_logs(tmp_path, mw_home):
    pytest.importorskip("tensorboard")
    spec = fake_spec(tmp_path, "{worker: {replicas: 1}}")
    assert mw("run", str(spec), "-q", "--", "--epochs", "1", home=mw_home).returncode == 0
    doc = status(mw_home)
    (Path(doc["output_dir"]) / "logs").mkdir()
    (port,) = free_ports(1)
    tb = mw_bg(mw_home, "tensorboard", "last", "--port", str(port), "--json")
    try:
        ready = json.loads(tb.stdout.readline())
        assert ready["url"] == f"http://127.0.0.1:{port}/" and ready["logdir"].endswith("logs")
        with urllib.request.urlopen(ready["url"], timeout=300) as resp:
            assert resp.status == 200
    finally:
        tb.send_signal(signal.SIGINT)
        try:
            tb.wait(timeout=300)  # it stops TensorBoard (SIGTERM, SIGKILL after 10 s) on a loaded machine
        except subprocess.TimeoutExpired:
            spy = str(Path(sys.executable).parent / "py-spy")
            stacks = subprocess.run([spy, "dump", "--pid", str(tb.pid)], capture_output=True, text=True).stdout
            tb.kill()
            pytest.fail(f"`multiworker tensorboard` still ran 300 s after SIGINT; its stacks:\n{stacks}\n"
                        f"{tb.communicate()[1][-2000:]}")
    assert tb.returncode == 0, tb.stderr.read()
    time.sleep(0.2)
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2)
