"""A recorded pid that now belongs to another process is never signalled: the group's stop and
close, stray cleanup on cancel and Lost, and the watchdog all check the process's start time."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest

from multiworker import procs
from multiworker.backends.local import LocalGroup, watchdog
from multiworker.backends.local import backend as local_backend
from multiworker.cluster import ReplicaId
from multiworker.job import JobState

W0 = ReplicaId("worker", 0)


@pytest.fixture
def victim():
    """An unrelated process leading its own session: it holds the pid a stale record names."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    deadline = time.monotonic() + 5
    while procs.start_ticks(proc.pid) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    yield proc
    proc.kill()
    proc.wait()


def _stale_record(pid: int) -> procs.Child:
    """A replica record that exited and was reaped, its pid since reused by process ``pid``."""
    old = procs.Child([sys.executable, "-c", "pass"])
    old.wait()
    old.pid = pid
    old.start_ticks = procs.start_ticks(pid) - 1  # started before the process now holding the pid
    return old


def _alive(proc: subprocess.Popen) -> bool:
    time.sleep(0.2)
    return proc.poll() is None


def test_signal_group_checks_identity(victim):
    ticks = procs.start_ticks(victim.pid)
    assert ticks is not None and procs.start_ticks(2**22 + 1) is None
    assert not procs.signal_group(victim.pid, signal.SIGKILL, ticks - 1)
    assert _alive(victim)
    assert procs.signal_group(victim.pid, signal.SIGKILL, ticks)  # the right identity: killed
    assert victim.wait(timeout=60) == -signal.SIGKILL


def test_child_records_its_start_time(tmp_path):
    child = procs.spawn([sys.executable, "-c", "import time; time.sleep(30)"], cwd=tmp_path, env={},
                        log_path=tmp_path / "c.log")
    try:
        assert child.start_ticks == procs.start_ticks(child.pid)
    finally:
        procs.stop_groups([child], 0.0)
    assert child.returncode in (-signal.SIGTERM, -signal.SIGKILL)


def test_group_stop_and_close_spare_a_reused_pid(victim):
    group = LocalGroup()
    group._procs[W0] = _stale_record(victim.pid)
    assert not group.signal(W0, signal.SIGKILL)
    group.stop([W0], grace=0.1)
    group.close()
    assert _alive(victim)


def test_stray_cleanup_spares_a_reused_pid(victim, monkeypatch, mw_home):
    stale = {victim.pid: procs.start_ticks(victim.pid) - 1}
    monkeypatch.setattr(procs, "job_processes", lambda job_id: dict(stale))
    assert local_backend._stop_strays("abc", settle=0.0) == 0
    assert _alive(victim)
    monkeypatch.setattr(watchdog, "job_processes", lambda job_id: dict(stale))
    assert watchdog.main(["999999999", "abc"]) == 0  # its driver is gone: it cleans up at once
    assert _alive(victim)


def test_lost_cleanup_spares_a_reused_pid(victim, monkeypatch, tmp_path):
    from multiworker.job import Store

    store = Store()
    store.create_job(job_id="abcd1234", name="x", spec_json="{}", backend="local", job_dir=str(tmp_path))
    store.update_job("abcd1234", state="Running", supervisor_pid=999999999)
    monkeypatch.setattr(procs, "job_processes", lambda job_id: {victim.pid: procs.start_ticks(victim.pid) - 1})
    job = local_backend.LocalBackend().reconcile(store, store.get_job("abcd1234"))
    assert job.state == JobState.LOST and "killed" not in job.message
    assert _alive(victim)
