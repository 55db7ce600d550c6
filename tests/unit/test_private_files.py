"""A job's files that may show env values (spec.json, replica logs, supervisor.log) are 0600."""

from __future__ import annotations

import os
import stat
import sys
import time

from conftest import PROGRAMS

from multiworker import procs
from multiworker.backends.daemon import start_detached
from multiworker.job import JobState, LogLayout, Store
from multiworker.jobs import create_job
from multiworker.private_files import open_private, write_private_text
from multiworker.spec.load import load_spec


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_private_helpers_create_and_tighten(tmp_path):
    old = os.umask(0o022)
    try:
        loose = tmp_path / "loose.log"
        loose.write_text("x")
        loose.chmod(0o644)
        with open_private(loose) as f:
            f.write(b"y")
        write_private_text(tmp_path / "new.json", "{}")
    finally:
        os.umask(old)
    assert loose.read_text() == "xy" and _mode(loose) == 0o600
    assert _mode(tmp_path / "new.json") == 0o600


def test_job_files_are_private(tmp_path):
    (tmp_path / "job.yaml").write_text(f"name: p\nmodule: fakejob\nworking_dir: {PROGRAMS}\n"
                                       "pools: {worker: {replicas: 1}}\nenv: {API_KEY: secret}\n")
    old = os.umask(0o022)
    try:
        store = Store()
        job_id = create_job(store, load_spec(tmp_path / "job.yaml"), trainer_args=["--epochs", "1"])
        layout = LogLayout(store.home / "jobs" / job_id)
        assert _mode(layout.spec_file) == 0o600 and _mode(layout.job_dir) == 0o700
        start_detached(store, job_id)
        assert _mode(layout.supervisor_log) == 0o600
        deadline = time.monotonic() + 60
        while not JobState(store.get_job(job_id).state).is_terminal and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.get_job(job_id).state == JobState.SUCCEEDED
        assert _mode(layout.replica_log(0, "worker-0")) == 0o600
        child = procs.spawn([sys.executable, "-c", "print(1)"], cwd=tmp_path, env={}, log_path=tmp_path / "r.log")
        child.wait()
    finally:
        os.umask(old)
    assert _mode(tmp_path / "r.log") == 0o600 and (tmp_path / "r.log").read_text() == "1\n"
