"""Reading jobs back: the status document, and truthful state when a supervisor is gone."""

from __future__ import annotations

import json
import signal
import time

from multiworker.backends.local import procs
from multiworker.store import TERMINAL_STATES, Store

__all__ = ["job_status", "refresh_liveness", "HEARTBEAT_STALE"]

# A running job whose supervisor is gone and whose heartbeat is older than this is Lost.
HEARTBEAT_STALE = 10.0


def refresh_liveness(store: Store, job_id: str) -> dict:
    """If the job claims to run but its supervisor is gone, record Lost and stop any stray replica."""
    job = store.get_job(job_id)
    if job["state"] in TERMINAL_STATES or job.get("backend", "local") != "local":
        return job
    heartbeat = job.get("heartbeat_at") or job["created_at"]
    if procs.pid_alive(job["supervisor_pid"]) or time.time() - heartbeat < HEARTBEAT_STALE:
        return job
    if job["state"] == "Pending" and job["supervisor_pid"] is None and time.time() - job["created_at"] < 60:
        return job
    strays = procs.processes_of_job(job_id)
    for pid in strays:
        procs.signal_group(pid, signal.SIGKILL)
    message = f"the supervisor (pid {job['supervisor_pid']}) is gone; last heartbeat {time.time() - heartbeat:.0f}s ago"
    if strays:
        message += f"; killed {len(strays)} leftover replica process(es)"
    store.update_job(job_id, state="Lost", finished_at=time.time(), message=message)
    for rep in store.replicas(job_id):
        if rep["state"] in ("Pending", "Running"):
            store.upsert_replica(job_id, rep["role"], rep["idx"], state="Lost")
    store.add_event(job_id, "Lost", message, warning=True)
    return store.get_job(job_id)


def job_status(store: Store, job_id: str) -> dict:
    """The status document of ``multiworker status --json``."""
    job = refresh_liveness(store, job_id)
    end = job["finished_at"] or time.time()
    metrics = store.metrics(job_id, "epoch")
    last = metrics[-1]["data"] if metrics else None
    finals = [m["data"] for m in store.metrics(job_id, "final")]
    evals = [m["data"] for m in store.metrics(job_id, "eval")]
    samples: dict[str, dict] = {}
    for row in store.samples(job_id)[-200:]:
        samples[row["replica"]] = row
    replicas = []
    for r in store.replicas(job_id):
        name = f"{r['role']}-{r['idx']}"
        sample = samples.get(name) if r["state"] == "Running" else None
        replicas.append({
            "role": r["role"],
            "index": r["idx"],
            "name": name,
            "state": r["state"],
            "pid": r["pid"],
            "port": r["port"],
            "exit_code": r["exit_code"],
            "attempt": r["attempt"],
            "cpu_percent": sample["cpu_percent"] if sample else None,
            "rss_bytes": sample["rss_bytes"] if sample else None,
            "log": r["log_path"],
        })
    options = json.loads(job["options_json"] or "{}")
    return {
        "id": job["id"],
        "name": job["name"],
        "state": job["state"],
        "backend": job["backend"],
        "format": job["format"],
        "restarts": job["restarts"],
        "output_dir": job["output_dir"],
        "job_dir": job["job_dir"],
        "spec_path": job["spec_path"],
        "created_at": job["created_at"],
        "started_at": job["started_at"],
        "finished_at": job["finished_at"],
        "duration_seconds": round(end - (job["started_at"] or job["created_at"]), 3),
        "message": job["message"],
        "supervisor_pid": job["supervisor_pid"],
        "trainer_args": options.get("trainer_args", []),
        "inject_failures": options.get("inject_failures", []),
        "epoch": last.get("epoch") if last else None,
        "epochs": last.get("epochs") if last else None,
        "last_metrics": last,
        "final_metrics": finals[-1] if finals else None,
        "eval_metrics": evals[-1] if evals else None,
        "replicas": replicas,
    }
