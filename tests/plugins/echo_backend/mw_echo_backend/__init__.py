"""A backend that lives only in the test tree, found through its entry point: every replica a short
local process that greets, prints its arguments and one epoch metric line, and (the primary)
reports a hypertune metric; all recorded through the job's journal, as a real backend does."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from pydantic import Field

from multiworker.backends.base import Backend, BackendOptions
from multiworker.backends.driver import stop_driver
from multiworker.cluster import ReplicaId, primary_replica
from multiworker.job import JobRecord, JobState, Journal, ReplicaState, Store

__all__ = ["EchoBackend", "EchoOptions"]

_PROGRAM = r"""
import json, os, sys, time
name = os.environ["ECHO_REPLICA"]
print(f"{os.environ['ECHO_GREETING']} from {name}; args: {' '.join(sys.argv[1:])}", flush=True)
print("MULTIWORKER_METRIC " + json.dumps({"kind": "epoch", "epoch": 1, "epochs": 1, "loss": 0.5}), flush=True)
path = os.environ.get("CLOUD_ML_HP_METRIC_FILE")
if path and name == os.environ["ECHO_PRIMARY"]:
    report = {"loss": "0.5", "global_step": "1", "timestamp": time.time(),
              "trial": os.environ.get("CLOUD_ML_TRIAL_ID", "0")}
    with open(path, "w") as fh:
        fh.write(json.dumps(report) + "\n")
"""


class EchoOptions(BackendOptions):
    greeting: str = Field("hello", description="what every replica says first")


class EchoBackend(Backend):
    """Replicas as short local processes that echo the greeting option and the trainer args."""

    name = "echo"
    Options = EchoOptions

    def drive(self, record: JobRecord, options: EchoOptions, journal: Journal) -> JobState:
        journal.start_attempt(0)
        journal.set_state(JobState.RUNNING, started_at=time.time())
        journal.event("Greeting", f"the echo backend says {options.greeting}")
        primary = primary_replica(record.spec).name
        replicas = [ReplicaId(role, i) for role, n in record.spec.replica_counts().items() for i in range(n)]
        running = {}
        for rid in replicas:
            log_path = record.layout.replica_log(0, rid.name)
            env = {**os.environ, **(record.spec.env or {}), "ECHO_GREETING": options.greeting,
                   "ECHO_REPLICA": rid.name, "ECHO_PRIMARY": primary}
            with open(log_path, "wb") as out:
                proc = subprocess.Popen([sys.executable, "-c", _PROGRAM, *record.run.trainer_args], cwd=record.job_dir,
                                        env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
            running[rid] = (proc, log_path)
            journal.replica(rid, ReplicaState.RUNNING, pid=proc.pid, started_at=time.time(), log_path=str(log_path))
        failed = []
        for rid, (proc, log_path) in running.items():
            code = proc.wait()
            journal.feed(rid.name, log_path.read_bytes())
            state = ReplicaState.SUCCEEDED if code == 0 else ReplicaState.FAILED
            journal.replica(rid, state, exit_code=code, finished_at=time.time())
            if code:
                failed.append(rid.name)
        journal.end_attempt(0, "failed" if failed else "succeeded")
        if failed:
            return journal.finish(JobState.FAILED, f"{', '.join(failed)} failed", reason="Failed")
        return journal.finish(JobState.SUCCEEDED, f"every replica said {options.greeting}")

    def cancel(self, store: Store, job: JobRecord, *, timeout: float | None = None) -> JobRecord:
        if job.is_terminal:
            return job
        job = stop_driver(store, job, timeout)
        if not job.is_terminal:
            store.update_job(job.id, state=JobState.CANCELLED, finished_at=time.time(), message="cancelled")
            job = store.get_job(job.id)
        return job
