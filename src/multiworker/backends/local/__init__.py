"""The local backend: every replica a supervised process on this machine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from multiworker.backends.local.observer import NullObserver, Observer
from multiworker.backends.local.supervisor import EXIT_CODES, Supervisor
from multiworker.faults import check_injections, parse_injection
from multiworker.spec.load import LoadedSpec
from multiworker.store import Store, new_job_id

__all__ = ["create_job", "run_foreground", "start_detached", "EXIT_CODES", "Supervisor"]


def create_job(
    store: Store,
    loaded: LoadedSpec,
    *,
    trainer_args: list[str] | tuple[str, ...] = (),
    inject_failures: list[str] | tuple[str, ...] = (),
) -> str:
    """Record a new Pending job with everything a supervisor needs to run it; return its id."""
    injections = [parse_injection(t) for t in inject_failures]
    check_injections(loaded.spec, injections)
    job_id = new_job_id()
    while store.has_job(job_id):
        job_id = new_job_id()
    job_dir = store.home / "jobs" / job_id
    job_dir.mkdir(parents=True, exist_ok=True)
    spec = loaded.spec
    output_dir = loaded.resolve(spec.output_dir) if spec.output_dir else job_dir / "output"
    (job_dir / "spec.json").write_text(spec.model_dump_json(indent=2, exclude_none=True))
    options = {"trainer_args": list(trainer_args), "inject_failures": [str(i) for i in injections],
               "notes": list(loaded.notes)}
    store.create_job(
        job_id=job_id,
        name=spec.name,
        spec_json=spec.model_dump_json(),
        format=loaded.format,
        spec_path=str(loaded.path.resolve()) if loaded.path else None,
        base_dir=str(loaded.base_dir),
        output_dir=str(output_dir),
        job_dir=str(job_dir),
        options_json=json.dumps(options),
    )
    return job_id


def run_foreground(store: Store, job_id: str, observer: Observer | None = None) -> str:
    """Supervise the job in this process until it ends; return its final state."""
    return Supervisor(store, job_id, observer or NullObserver()).run()


def start_detached(store: Store, job_id: str, *, wait_running: float = 10.0) -> int:
    """Start the supervisor in the background, independent of this terminal; return its pid."""
    job = store.get_job(job_id)
    log_path = os.path.join(job["job_dir"], "supervisor.log")
    env = {**os.environ, "MULTIWORKER_HOME": str(store.home)}
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "multiworker.backends.local.daemon", job_id],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
            close_fds=True,
        )
    store.update_job(job_id, supervisor_pid=proc.pid, heartbeat_at=time.time())
    deadline = time.monotonic() + wait_running
    while time.monotonic() < deadline and store.get_job(job_id)["state"] == "Pending" and proc.poll() is None:
        time.sleep(0.05)
    return proc.pid
