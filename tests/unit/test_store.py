"""The job store: migrations from older schema versions, and the queries monitoring reads."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from multiworker.errors import JobNotFound, UserError
from multiworker.job import JobState, ReplicaState, RunOptions
from multiworker.job.store import MIGRATIONS, SCHEMA_VERSION, Store

SPEC = json.dumps({"name": "old", "pools": {"worker": {"replicas": 2}}})


def _v1_store(home) -> None:
    """A store exactly as the first released schema left it, with one finished job."""
    store = Store(home, migrate_to=1)
    assert store.schema_version == 1
    store._conn.execute(
        "INSERT INTO jobs (id, name, state, spec_json, job_dir, created_at, started_at, finished_at) "
        "VALUES ('abcd1234', 'old', 'Succeeded', ?, ?, ?, ?, ?)",
        (SPEC, str(home / "jobs" / "abcd1234"), time.time() - 100, time.time() - 90, time.time() - 50))
    store._conn.execute("INSERT INTO replicas (job_id, role, idx, state) VALUES ('abcd1234', 'worker', 0, 'Succeeded')")
    store._conn.execute("INSERT INTO events (job_id, ts, type, reason, message) "
                        "VALUES ('abcd1234', 1.0, 'Normal', 'Created', 'job old created')")
    store.close()


def test_v1_store_opens_and_migrates(tmp_path):
    _v1_store(tmp_path)
    store = Store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION == len(MIGRATIONS)
    job = store.get_job(store.resolve("abcd"))
    assert job.name == "old" and job.heartbeat_at is None
    assert [e["reason"] for e in store.events("abcd1234")] == ["Created"]
    # the tables later versions added work on the migrated store
    store.add_metric("abcd1234", 0, "worker-0", {"kind": "epoch", "epoch": 1, "loss": 0.5})
    store.add_samples("abcd1234", [("worker-0", 50.0, 1 << 20)])
    store.set_progress("abcd1234", 0, {"worker-0": {"epoch": 1, "epochs": 2, "step": 3, "steps": 10}})
    assert store.progress("abcd1234")["worker-0"]["step"] == 3
    assert store.latest_samples("abcd1234")["worker-0"]["cpu_percent"] == 50.0
    store.delete_job("abcd1234")
    with pytest.raises(JobNotFound):
        store.get_job("abcd1234")


@pytest.mark.parametrize("start", range(1, SCHEMA_VERSION), ids=lambda v: f"v{v}")
def test_every_older_version_migrates(tmp_path, start):
    old = Store(tmp_path, migrate_to=start)
    old._conn.execute("INSERT INTO jobs (id, name, state, spec_json, created_at) VALUES ('abcd1234', 'old', 'Failed', ?, 1.0)",
                      (SPEC,))
    old._conn.execute("INSERT INTO replicas (job_id, role, idx, state) VALUES ('abcd1234', 'worker', 0, 'Failed')")
    old.close()
    store = Store(tmp_path)
    assert store.schema_version == SCHEMA_VERSION
    # the old row reads as a typed record: a local job with no handle, no run options, its spec decoded
    job = store.get_job("abcd1234")
    assert (job.backend, job.handle, job.state, job.run) == ("local", {}, JobState.FAILED, RunOptions())
    assert job.spec.replica_counts() == {"worker": 2} and job.backend_options == {}
    # v4 (the backend seam): a handle, and replicas gain host and node
    store.set_handle("abcd1234", {"k": 1})
    store.upsert_replica("abcd1234", "worker", 0, state=ReplicaState.FAILED, host="10.0.0.2", node="n2")
    (rep,) = store.replicas("abcd1234")
    assert (rep["host"], rep["node"], store.get_job("abcd1234").handle) == ("10.0.0.2", "n2", {"k": 1})


def test_update_job_refuses_a_column_it_does_not_own(tmp_path):
    """A typo in a column name is a bug: update_job takes only the settable columns."""
    store = Store(tmp_path)
    store.create_job(job_id="abcd1234", name="j", spec_json=SPEC)
    with pytest.raises(ValueError, match="stat"):
        store.update_job("abcd1234", stat="Running")
    with pytest.raises(ValueError, match="spec_json"):
        store.update_job("abcd1234", spec_json="{}")
    store.update_job("abcd1234", state=JobState.RUNNING, restarts=2)
    assert (store.get_job("abcd1234").state, store.get_job("abcd1234").restarts) == (JobState.RUNNING, 2)


def test_end_job_records_once(tmp_path):
    """Another process (cancel, Lost detection) records an end only if the driver has not."""
    store = Store(tmp_path)
    _job(store, "cccc0001", "Running")
    store.upsert_replica("cccc0001", "worker", 0, state="Running")
    assert store.end_job("cccc0001", JobState.LOST, "driver gone", replica_state="Lost")
    assert not store.end_job("cccc0001", JobState.CANCELLED, "too late", replica_state="Stopped")
    job = store.get_job("cccc0001")
    assert (job.state, job.message, store.replicas("cccc0001")[0]["state"]) == ("Lost", "driver gone", "Lost")
    assert [(e["type"], e["reason"]) for e in store.events("cccc0001")][-1] == ("Warning", "Lost")


def test_newer_store_is_refused_with_a_hint(tmp_path):
    Store(tmp_path).close()
    conn = sqlite3.connect(tmp_path / "jobs.db")
    conn.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(UserError, match="newer than this multiworker"):
        Store(tmp_path)


def _job(store: Store, job_id: str, state: str = "Succeeded", **fields) -> None:
    store.create_job(job_id=job_id, name="j", spec_json=SPEC, **fields)
    store.update_job(job_id, state=state)


def test_progress_rate_within_and_across_epochs(tmp_path, monkeypatch):
    store = Store(tmp_path)
    _job(store, "aaaa0001", "Running")
    clock = iter([100.0, 102.0, 104.0, 106.0])
    monkeypatch.setattr("multiworker.job.store.time.time", lambda: next(clock))
    store.set_progress("aaaa0001", 0, {"w": {"epoch": 1, "epochs": 3, "step": 10, "steps": 50}})
    store.set_progress("aaaa0001", 0, {"w": {"epoch": 1, "epochs": 3, "step": 30, "steps": 50}})
    assert store.progress("aaaa0001")["w"]["steps_per_sec"] == pytest.approx(10.0)
    store.set_progress("aaaa0001", 0, {"w": {"epoch": 2, "epochs": 3, "step": 10, "steps": 50}})
    assert store.progress("aaaa0001")["w"]["steps_per_sec"] == pytest.approx(15.0)  # 20 + 10 steps in 2 s
    store.set_progress("aaaa0001", 1, {"w": {"epoch": 2, "epochs": 3, "step": 5, "steps": 50}})
    assert store.progress("aaaa0001")["w"]["steps_per_sec"] is None  # a new attempt starts over


def test_queries_for_list_and_gc(tmp_path):
    store = Store(tmp_path)
    _job(store, "bbbb0001", "Succeeded")
    store.update_job("bbbb0001", finished_at=time.time() - 3600)
    _job(store, "bbbb0002", "Running")
    _job(store, "bbbb0003", "Failed")
    store.update_job("bbbb0003", finished_at=time.time())
    for idx, state in enumerate(("Running", "Running", "Failed")):
        store.upsert_replica("bbbb0002", "worker", idx, state=state)
    assert [j.id for j in store.finished_before(time.time() - 60)] == ["bbbb0001"]
    assert store.replica_summary()["bbbb0002"] == {"Running": 2, "Failed": 1}
    store.add_samples("bbbb0002", [("worker-0", 10.0, 100), ("worker-1", 20.0, 200)])
    store.add_samples("bbbb0002", [("worker-0", 30.0, 300)])
    latest = store.latest_samples("bbbb0002")
    assert (latest["worker-0"]["cpu_percent"], latest["worker-1"]["rss_bytes"]) == (30.0, 200)
    for n in range(5):
        store.add_event("bbbb0002", f"R{n}")
    assert [e["reason"] for e in store.recent_events("bbbb0002", 2)] == ["R3", "R4"]
