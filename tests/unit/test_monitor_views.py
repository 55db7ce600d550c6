"""Monitoring from recorded jobs (no processes): list, status, describe, logs, watch frames,
liveness, cancel/delete/gc, through the library and the CLI runner."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from multiworker.cli import jobs_cmd, monitor_cmd
from multiworker.errors import UserError
from multiworker.job import Store
from multiworker.monitor.lifecycle import cancel_job, delete_job, gc_jobs
from multiworker.monitor.logs import follow_logs, log_files, read_logs
from multiworker.monitor.watch import render, replica_progress, snapshot
from multiworker.spec.model import JobSpec
from multiworker.status import job_status, refresh_liveness

SPEC = JobSpec(name="demo", module="fakejob", pools={"chief": {}, "worker": {"replicas": 2}})
REPLICAS = ("chief-0", "worker-0", "worker-1")


def record_job(store: Store, job_id: str = "feed0001", *, state: str = "Succeeded", attempts: int = 1,
               pid: int | None = None, age: float = 60.0) -> str:
    """A job as a supervisor would have recorded it, with a log file per replica and attempt."""
    job_dir = store.home / "jobs" / job_id
    now = time.time()
    store.create_job(job_id=job_id, name="demo", spec_json=SPEC.model_dump_json(), base_dir=str(job_dir),
                     job_dir=str(job_dir), output_dir=str(job_dir / "output"))
    finished = now if state not in ("Running", "Pending", "Restarting") else None
    store.update_job(job_id, state=state, started_at=now - age, finished_at=finished, heartbeat_at=now,
                     supervisor_pid=pid, restarts=attempts - 1, created_at=now - age)
    for n in range(attempts):
        store.start_attempt(job_id, n)
        for name in REPLICAS:
            path = job_dir / f"attempt_{n}" / f"{name}.log"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(f"{name} attempt {n} line {i}\n" for i in range(5)))
        if n < attempts - 1:
            store.end_attempt(job_id, n, "Restarting")
            store.add_event(job_id, "Restarting", "restart 1/3 of the whole group", warning=True)
    (job_dir / "output").mkdir(parents=True, exist_ok=True)
    for name in REPLICAS:
        role, idx = name.split("-")
        rep_state = "Running" if finished is None else "Succeeded"
        store.upsert_replica(job_id, role, int(idx), state=rep_state, pid=4242, attempt=attempts - 1,
                             exit_code=None if finished is None else 0, log_path=str(job_dir / f"{name}.log"))
        store.add_event(job_id, "Started", f"pid 4242 port 1 attempt {attempts - 1}", replica=name)
    for epoch in (1, 2):
        store.add_metric(job_id, attempts - 1, "chief-0", {"kind": "epoch", "epoch": epoch, "epochs": 4,
                                                             "loss": 1.0 / epoch, "accuracy": 0.5 + epoch / 10})
    store.add_samples(job_id, [(name, 50.0, 64 << 20) for name in REPLICAS])
    if finished is None:
        store.set_progress(job_id, attempts - 1, {"chief-0": {"epoch": 3, "epochs": 4, "step": 25, "steps": 100}})
    else:
        store.add_event(job_id, state, "chief-0 succeeded")
    return job_id


@pytest.fixture
def store(mw_home) -> Store:
    return Store(mw_home)


@pytest.fixture
def cli():
    app = typer.Typer()
    jobs_cmd.register(app)
    monitor_cmd.register(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args), catch_exceptions=True)


# -- status, list, describe -------------------------------------------------------------------
def test_status_reports_epoch_progress_and_resources(store):
    job_id = record_job(store, state="Running", pid=os.getpid())
    doc = job_status(store, job_id)
    assert (doc["state"], doc["epoch"], doc["epochs"]) == ("Running", 2, 4)
    chief = doc["replicas"][0]
    assert chief["progress"]["step"] == 25 and chief["cpu_percent"] == 50.0 and chief["rss_bytes"] == 64 << 20
    prog = replica_progress(chief, doc)
    assert (prog["epoch"], prog["step"], prog["fraction"]) == ("3/4", "25/100", pytest.approx(0.5625))
    worker = replica_progress(doc["replicas"][1], doc)
    assert worker["borrowed"] and worker["epoch"] == "3/4"  # lockstep: shown as the chief's


def test_cli_list_status_describe(store, cli):
    record_job(store, "feed0001")
    record_job(store, "beef0002", attempts=2)
    rows = json.loads(cli("list", "--json").stdout)
    assert [(r["id"], r["replicas"], r["restarts"]) for r in rows] == [("beef0002", 3, 1), ("feed0001", 3, 0)]
    table = cli("list").stdout
    assert "beef0002" in table and "Succeeded" in table and "RESTARTS" in table
    assert json.loads(cli("status", "fee", "--json").stdout)["id"] == "feed0001"
    assert "epoch 2/4  loss 0.5" in cli("status", "last").stdout
    record_job(store, "a11ve003", state="Running", pid=os.getpid())
    human = cli("status", "a11").stdout
    assert "Running" in human and "64.0 MiB" in human and "epoch 3/4 step 25/100" in human
    doc = json.loads(cli("describe", "beef", "--json").stdout)
    assert doc["spec"]["pools"]["worker"]["replicas"] == 2
    assert [a["outcome"] for a in doc["attempts"]] == ["Restarting", None]
    assert "Restarting" in [e["reason"] for e in doc["events"]]
    text = cli("describe", "beef").stdout
    assert "Restarting" in text and "module: fakejob" in text and "Events:" in text


def test_unknown_job_is_one_line_exit_2(store):
    env = {**os.environ, "MULTIWORKER_HOME": str(store.home)}
    proc = subprocess.run([sys.executable, "-m", "multiworker", "status", "nope"], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "no job matches 'nope'" in proc.stderr


# -- liveness ---------------------------------------------------------------------------------
def test_dead_supervisor_is_lost_with_an_event(store):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    job_id = record_job(store, state="Running", pid=dead.pid)
    job = refresh_liveness(store, job_id)
    assert job.state == "Lost" and "is gone" in job.message
    assert {r["state"] for r in store.replicas(job_id)} == {"Lost"}
    assert [e["reason"] for e in store.events(job_id)].count("Lost") == 1
    refresh_liveness(store, job_id)  # idempotent
    assert [e["reason"] for e in store.events(job_id)].count("Lost") == 1


def test_live_supervisor_stays_running_and_reused_pid_does_not(store):
    job_id = record_job(store, state="Running", pid=os.getpid())
    assert refresh_liveness(store, job_id).state == "Running"
    # our pid, but "our" process was created long after the job's last heartbeat: a reused pid
    store.update_job(job_id, heartbeat_at=1000.0, started_at=999.0)
    assert refresh_liveness(store, job_id).state == "Lost"


# -- logs -------------------------------------------------------------------------------------
def test_logs_latest_attempt_prefixed_and_filters(store, cli):
    job_id = record_job(store, attempts=2)
    out = cli("logs", job_id).stdout.splitlines()
    assert len(out) == 15 and out[0] == "[chief-0] chief-0 attempt 1 line 0"
    only = cli("logs", job_id, "--replica", "worker-1", "--tail", "2").stdout.splitlines()
    assert only == ["worker-1 attempt 1 line 3", "worker-1 attempt 1 line 4"]
    first = cli("logs", job_id, "-r", "worker-0", "--attempt", "0", "--json").stdout.splitlines()
    assert json.loads(first[0]) == {"replica": "worker-0", "attempt": 0, "line": "worker-0 attempt 0 line 0"}
    bad = cli("logs", job_id, "--replica", "worker-7")
    assert isinstance(bad.exception, UserError) and "worker-1" in str(bad.exception)
    with pytest.raises(UserError, match="attempts are 0..1"):
        log_files(store, job_id, attempt=5)


def test_tail_and_carriage_returns(tmp_path):
    path = tmp_path / "r.log"
    path.write_bytes(b"a\nb\nprogress 1\rprogress 2\rprogress 3\nlast without newline")
    lines = [ln.text for ln in read_logs([("r", path)], 0, tail=2)]
    assert lines == ["progress 3", "last without newline"]
    assert [ln.text for ln in read_logs([("r", path)], 0, tail=0)] == []
    assert len(list(read_logs([("r", path)], 0))) == 4


def test_follow_moves_across_attempts_and_ends_with_the_job(store):
    job_id = record_job(store, state="Running", pid=os.getpid())
    job_dir = Path(store.get_job(job_id).job_dir)
    calls = {"n": 0}

    def refresh(st, jid):  # the job restarts, writes, then ends, as the reads go by
        calls["n"] += 1
        if calls["n"] == 2:
            st.start_attempt(jid, 1)
            (job_dir / "attempt_1").mkdir()
            (job_dir / "attempt_1" / "worker-1.log").write_text("after restart\nno newline")
        if calls["n"] == 4:
            st.update_job(jid, state="Succeeded")
        return st.get_job(jid)

    lines = list(follow_logs(store, job_id, replica="worker-1", tail=1, poll=0.01, refresh=refresh))
    assert [(ln.replica, ln.attempt, ln.text) for ln in lines] == [
        ("worker-1", 0, "worker-1 attempt 0 line 4"),
        (None, 1, "--- attempt 1: the group restarted ---"),
        ("worker-1", 1, "after restart"),
        ("worker-1", 1, "no newline"),
    ]


# -- watch ------------------------------------------------------------------------------------
def test_watch_frame_shows_progress_rate_resources_and_events(store):
    job_id = record_job(store, state="Running", pid=os.getpid())
    store.set_progress(job_id, 0, {"chief-0": {"epoch": 3, "epochs": 4, "step": 45, "steps": 100}})
    console = Console(record=True, width=120, color_system=None)
    console.print(render(snapshot(store, job_id)))
    text = console.export_text()
    assert "Running" in text and "3/4" in text and "45/100" in text and "64.0 MiB" in text
    assert "Started" in text and "Ctrl-C stops watching" in text
    assert "━" in text  # a progress bar


def test_watch_of_an_ended_job_draws_once_and_exits_with_its_code(store, cli):
    record_job(store, state="Succeeded")
    result = cli("watch", "last")
    assert result.exit_code == 0 and "Succeeded" in result.stdout


# -- cancel, delete, gc ------------------------------------------------------------------------
def test_cancel_without_a_supervisor_marks_cancelled(store, cli):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    job_id = record_job(store, state="Running", pid=dead.pid)
    job = cancel_job(store, job_id)
    assert job.state == "Cancelled" and "supervisor was gone" in job.message
    assert {r["state"] for r in store.replicas(job_id)} == {"Stopped"}
    again = json.loads(cli("cancel", job_id, "--json").stdout)
    assert again == [{"id": job_id, "state": "Cancelled", "was": "Cancelled", "message": job.message}]


def test_delete_refuses_a_running_job_and_keeps_outside_output(store, tmp_path):
    job_id = record_job(store, state="Running", pid=os.getpid())
    with pytest.raises(UserError, match="cancel it first"):
        delete_job(store, job_id)
    done = record_job(store, "feed0002")
    outside = tmp_path / "my-output"
    outside.mkdir()
    store.update_job(done, output_dir=str(outside))
    result = delete_job(store, done)
    assert result["removed"] == [str(store.home / "jobs" / done)] and result["kept"] == [str(outside)]
    assert outside.exists() and not (store.home / "jobs" / done).exists()
    assert [j.id for j in store.list_jobs()] == [job_id]


def test_gc_deletes_only_old_ended_jobs(store, cli):
    old = record_job(store, "0ld00001")
    store.update_job(old, finished_at=time.time() - 8 * 86400)
    recent = record_job(store, "new00001")
    running = record_job(store, "run00001", state="Running", pid=os.getpid())
    store.update_job(running, created_at=time.time() - 30 * 86400)
    dry = json.loads(cli("gc", "--older-than", "7d", "--dry-run", "--json").stdout)
    assert [r["id"] for r in dry] == [old] and (store.home / "jobs" / old).exists()
    assert [r["id"] for r in gc_jobs(store, 7 * 86400)] == [old]
    assert sorted(j.id for j in store.list_jobs()) == sorted([recent, running])
    bad = cli("gc", "--older-than", "soon")
    assert isinstance(bad.exception, UserError)


def test_gc_removes_what_a_killed_save_left_in_ended_jobs_only(mw_home):
    import os

    from multiworker.monitor.lifecycle import sweep_leftovers

    store = Store(mw_home)
    record_job(store, "feed0001")  # Succeeded
    record_job(store, "feed0002", state="Running", pid=os.getpid())
    dead = 2**22 + 12345
    left = []
    for job in ("feed0001", "feed0002"):
        out = store.home / "jobs" / job / "output"
        (out / f"model.tmp-{dead}-0123abcd" / "variables").mkdir(parents=True)
        (out / f"metrics.json.tmp-{dead}-89abcdef").write_text("{")
        (out / "model").mkdir()
        left.append(out)
    assert len(sweep_leftovers(store, dry_run=True)) == 2
    assert len(sweep_leftovers(store)) == 2
    assert sorted(p.name for p in left[0].iterdir()) == ["model"]
    assert len(list(left[1].iterdir())) == 3  # a running job's files are its own
