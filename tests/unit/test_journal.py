"""The journal, the one writer of a running job: a failing write is reported once and supervision
goes on; the final state of another process (``cancel``) stands; live replicas end Stopped; stop
signals become a stop request, a second one "no more grace"."""

from __future__ import annotations

import os
import signal
import sqlite3
import time

import pytest
from test_controller import RUNNING, W0, W1, FakeGroup, Recorder, drive, make_job

from multiworker.cluster import ReplicaId
from multiworker.job import JobState, Journal, ReplicaState, Store
from multiworker.job import journal as journal_module

FULL = sqlite3.OperationalError("database or disk is full")
WRITES = ("update_job", "add_event", "upsert_replica", "add_metric", "add_samples", "set_progress", "start_attempt",
          "end_attempt")


def fail_writes(store: Store, monkeypatch, when=lambda: True) -> list[str]:
    """Make the store's writes raise FULL while ``when()``; return the names of the writes refused."""
    refused = []
    for name in WRITES:
        real = getattr(store, name)

        def write(*args, _real=real, _name=name, **kwargs):
            if when():
                refused.append(_name)
                raise FULL
            return _real(*args, **kwargs)

        monkeypatch.setattr(store, name, write)
    return refused


def states(store: Store, job_id: str) -> dict[str, str]:
    return {f"{r['role']}-{r['idx']}": r["state"] for r in store.replicas(job_id)}


def test_failing_writes_are_reported_once_and_nothing_raises(tmp_path, monkeypatch):
    store, job_id = make_job(tmp_path)
    obs = Recorder()
    journal = Journal(store, store.get_job(job_id), obs)
    refused = fail_writes(store, monkeypatch)
    journal.claim()
    journal.set_state(JobState.RUNNING, started_at=time.time())
    journal.start_attempt(0)
    journal.replica(W0, ReplicaState.RUNNING, pid=1)
    journal.event("Started", "pid 1", replica="worker-0")
    journal.feed("worker-0", b'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 1, "loss": 0.5}\nhello\n')
    journal.samples([("worker-0", 10.0, 1 << 20)])
    assert journal.failed_writes == len(refused) == 7
    assert obs.events == ["StoreWriteFailed", "Started"]  # the event still reaches the console
    assert obs.lines == [("worker-0", "hello")] and obs.metrics == [("worker-0", "epoch", True)]
    assert store.get_job(job_id).state is JobState.PENDING
    assert [e["reason"] for e in store.events(job_id)] == ["Created"]  # create_job's; none since


def test_a_full_disk_mid_job_leaves_the_replicas_running_to_success(tmp_path, monkeypatch):
    """Writes fail from the first poll to the fifth (space frees as the job goes on): the job is
    supervised to its end, nothing is stopped, and the final state is recorded once writes work."""
    store, job_id = make_job(tmp_path)
    obs = Recorder()
    full = {"on": False}
    epochs = [b'MULTIWORKER_METRIC {"kind": "epoch", "epoch": %d, "epochs": 2, "loss": 0.5}\n' % n for n in (1, 2)]

    def on_poll(group):
        full["on"] = 1 <= group.polls < 5

    group = FakeGroup([{W0: [RUNNING] * 8 + [0], W1: [RUNNING] * 8 + [0]}], logs={W0: [b"", *epochs]}, on_poll=on_poll)
    refused = fail_writes(store, monkeypatch, when=lambda: full["on"])
    assert drive(store, job_id, group, obs) is JobState.SUCCEEDED
    assert refused.count("add_metric") == 2 and obs.events.count("StoreWriteFailed") == 1  # both epochs, one report
    assert not [c for c in group.calls if c[0] in ("stop", "signal")]  # nobody was stopped for it
    job = store.get_job(job_id)
    assert job.state is JobState.SUCCEEDED and job.finished_at and job.message == "worker-0 succeeded"
    assert states(store, job_id) == {"worker-0": "Succeeded", "worker-1": "Succeeded"}
    assert "StoreWriteFailed" not in [e["reason"] for e in store.events(job_id)]  # it could not be written


def test_the_final_state_is_retried_until_written(tmp_path, monkeypatch):
    store, job_id = make_job(tmp_path)
    journal = Journal(store, store.get_job(job_id))
    tries = []
    fail_writes(store, monkeypatch, when=lambda: tries.append(1) or len(tries) <= 3)
    monkeypatch.setattr(journal_module.time, "sleep", lambda s: None)
    assert journal.finish(JobState.FAILED, "root cause: worker-1 exited 1") is JobState.FAILED
    job = store.get_job(job_id)
    assert (job.state, job.message) == (JobState.FAILED, "root cause: worker-1 exited 1")


@pytest.mark.parametrize("ended", [JobState.FAILED, JobState.SUCCEEDED, JobState.CANCELLED])
def test_a_final_state_the_full_store_refused_is_recorded_later_not_lost(tmp_path, monkeypatch, ended):
    from multiworker.backends.local.backend import LocalBackend

    store, job_id = make_job(tmp_path)
    journal = Journal(store, store.get_job(job_id))
    journal.claim()
    store.update_job(job_id, state=JobState.RUNNING, supervisor_pid=2**22 + 4321)  # a driver now gone
    full = [True]
    fail_writes(store, monkeypatch, when=lambda: full[0])
    monkeypatch.setattr(journal_module.time, "sleep", lambda s: None)
    long = "root cause: worker-1 exited 1\n" + "  | frame\n" * 1000
    assert journal.finish(ended, long) is ended
    assert store.get_job(job_id).state is JobState.RUNNING  # the store refused it
    full[0] = False  # space again; the driver is long gone
    job = LocalBackend().reconcile(store, store.get_job(job_id))
    assert job.state is ended
    assert job.message.startswith("root cause: worker-1 exited 1") and "the store could not be written" in job.message
    assert all(r["state"] != "Lost" for r in store.replicas(job_id))


def test_a_driver_gone_without_a_final_state_is_still_lost(tmp_path):
    from multiworker.backends.local.backend import LocalBackend

    store, job_id = make_job(tmp_path)
    Journal(store, store.get_job(job_id)).claim()  # reserved, never written
    store.update_job(job_id, state=JobState.RUNNING, supervisor_pid=2**22 + 4321)
    assert LocalBackend().reconcile(store, store.get_job(job_id)).state is JobState.LOST


def test_a_full_disk_is_named_as_the_cause_when_the_store_cannot_open(tmp_path, monkeypatch):
    from multiworker.errors import UserError

    Store(tmp_path / "home")
    real = sqlite3.connect

    def connect(*args, **kwargs):
        conn = real(*args, **kwargs)

        class Full:
            def __getattr__(self, name):
                return getattr(conn, name)

            def execute(self, sql, *a):
                if sql.startswith("PRAGMA journal_mode"):
                    raise FULL
                return conn.execute(sql, *a)
        return Full()

    monkeypatch.setattr("multiworker.job.store.sqlite3.connect", connect)
    with pytest.raises(UserError, match="disk is full\\); free space on the disk of") as info:
        Store(tmp_path / "home")
    assert "move the file away" not in str(info.value)


def test_finish_keeps_a_terminal_state_another_process_recorded(tmp_path):
    """`multiworker cancel` (another process) recorded Cancelled first: the driver's end does not
    overwrite it, nor its message, nor add an end event of its own."""
    store, job_id = make_job(tmp_path)
    obs = Recorder()
    journal = Journal(store, store.get_job(job_id), obs)
    journal.set_state(JobState.RUNNING)
    journal.replica(W0, ReplicaState.RUNNING, pid=11)
    assert store.end_job(job_id, JobState.CANCELLED, "cancelled by `multiworker cancel`",
                         replica_state=ReplicaState.STOPPED)
    assert journal.finish(JobState.FAILED, "supervisor error: lost the replicas", restarts=2) is JobState.CANCELLED
    job = store.get_job(job_id)
    assert (job.state, job.message, job.restarts) == (JobState.CANCELLED, "cancelled by `multiworker cancel`", 0)
    assert [e["reason"] for e in store.events(job_id)] == ["Created", "Cancelled"]  # end_job's, not a "Failed" one
    assert obs.finished == ("Cancelled", "cancelled by `multiworker cancel`")
    assert journal.finish(JobState.SUCCEEDED, "again") is JobState.CANCELLED  # once finished, finished


def test_finish_marks_live_replicas_stopped_and_keeps_ended_ones(tmp_path):
    store, job_id = make_job(tmp_path, pools="{chief: {}, worker: {replicas: 2}}")
    journal = Journal(store, store.get_job(job_id))
    journal.replica(W0, ReplicaState.RUNNING, pid=11)
    journal.replica(W1, ReplicaState.PENDING)
    journal.replica(ReplicaId("chief", 0), ReplicaState.SUCCEEDED, exit_code=0, finished_at=1.0)
    assert journal.finish(JobState.SUCCEEDED, "chief-0 succeeded", restarts=1) is JobState.SUCCEEDED
    assert states(store, job_id) == {"chief-0": "Succeeded", "worker-0": "Stopped", "worker-1": "Stopped"}
    reps = {f"{r['role']}-{r['idx']}": r for r in store.replicas(job_id)}
    assert reps["worker-0"]["finished_at"] > 1.0 and reps["chief-0"]["finished_at"] == 1.0
    job = store.get_job(job_id)
    assert (job.state, job.restarts, job.message) == (JobState.SUCCEEDED, 1, "chief-0 succeeded")
    end = store.events(job_id)[-1]
    assert (end["reason"], end["type"]) == ("Succeeded", "Normal")


def _until(predicate, timeout: float = 5.0) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end
        time.sleep(0.01)


def test_stop_signals_request_a_stop_and_a_second_one_calls_on_repeated_stop(tmp_path):
    store, job_id = make_job(tmp_path)
    journal = Journal(store, store.get_job(job_id))
    repeated = []
    journal.on_repeated_stop = lambda: repeated.append(journal.stop_signal)
    previous = {sig: signal.getsignal(sig) for sig in journal_module.STOP_SIGNALS}
    with journal.stop_signals():
        assert journal.stop_name == "cancel" and not journal.sleep(0.01)
        os.kill(os.getpid(), signal.SIGTERM)
        _until(lambda: journal.stop_signal is not None)
        assert journal.stop_signal == signal.SIGTERM and journal.stop_name == "SIGTERM" and repeated == []
        assert journal.sleep(60)  # returns at once: a stop was requested
        os.kill(os.getpid(), signal.SIGINT)  # no KeyboardInterrupt: the second stop, no more grace
        _until(lambda: repeated)
        assert repeated == [signal.SIGTERM] and journal.stop_signal == signal.SIGINT
    assert {sig: signal.getsignal(sig) for sig in journal_module.STOP_SIGNALS} == previous


def test_stop_signals_outside_the_main_thread_install_nothing(tmp_path):
    import threading

    store, job_id = make_job(tmp_path)
    journal = Journal(store, store.get_job(job_id))
    seen = []

    def body():
        with journal.stop_signals():
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=body)
    thread.start()
    thread.join()
    assert seen == [before]


@pytest.mark.parametrize("main_thread", [True, False], ids=["main-thread", "other-thread"])
def test_claim_records_the_pid_only_where_signals_reach(tmp_path, main_thread):
    """`cancel` stops a job by SIGTERM to its driver's pid: recorded only when the journal's thread
    takes signals (a dashboard thread driving a job does not)."""
    import threading

    store, job_id = make_job(tmp_path)
    journal = Journal(store, store.get_job(job_id))
    if main_thread:
        journal.claim()
    else:
        thread = threading.Thread(target=journal.claim)
        thread.start()
        thread.join()
    job = store.get_job(job_id)
    assert job.supervisor_pid == (os.getpid() if main_thread else None) and job.heartbeat_at
