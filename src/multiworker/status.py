"""Reading jobs back: truthful state (through the job's backend), and the documents that
``list``, ``status`` and ``describe`` print (as tables or ``--json``)."""

from __future__ import annotations

import logging
import time

from multiworker.backends.base import get_backend
from multiworker.errors import UserError
from multiworker.job import JobRecord, Store
from multiworker.metrics_line import metric_values
from multiworker.terminal import printable

__all__ = [
    "job_status",
    "job_rows",
    "describe_job",
    "refresh_liveness",
    "primary_name",
    "redact_env",
    "HEARTBEAT_STALE",
]

log = logging.getLogger(__name__)

# A live driver beats about once a second; older than this is shown as a warning.
HEARTBEAT_STALE = 10.0


def refresh_liveness(store: Store, job_id: str) -> JobRecord:
    """The job's record, made truthful by its backend first if it claims to run (a job whose
    driver is gone becomes Lost)."""
    job = store.get_job(job_id)
    if job.is_terminal:
        return job
    try:
        backend = get_backend(job.backend)
    except UserError as exc:  # recorded by a backend this installation lacks: show it as recorded
        log.warning("job %s: cannot check its state: %s", job_id, exc)
        return job
    return backend.reconcile(store, job)


def primary_name(job: JobRecord) -> str:
    """The replica whose metrics speak for the job: the chief, else worker-0. Read from the spec as
    recorded, so a reader still lists a job whose spec an older multiworker wrote."""
    chief = job.spec_dict.get("pools", {}).get("chief")
    return "chief-0" if chief is not None and chief.get("replicas", 1) > 0 else "worker-0"


def _duration(job: JobRecord) -> float | None:
    start = job.started_at
    if start is None:
        return None
    return round((job.finished_at or time.time()) - start, 3)


def _last_by_replica(rows: list[dict]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for row in rows:
        out[row["replica"]] = row["data"]
    return out


def job_status(store: Store, job_id: str) -> dict:
    """The status document of ``multiworker status --json``. ``last_metrics`` is the primary replica's
    last epoch line as recorded (bookkeeping included: epoch, steps, start_step...);
    ``last_metric_values`` holds only its values to show as metrics (loss, accuracy, images/s...)."""
    job = refresh_liveness(store, job_id)
    primary = primary_name(job)
    epoch_rows = store.metrics(job_id, "epoch")
    per_replica = _last_by_replica(epoch_rows)
    last = per_replica.get(primary) or (epoch_rows[-1]["data"] if epoch_rows else None)
    finals = store.metrics(job_id, "final")
    evals = store.metrics(job_id, "eval")
    samples = store.latest_samples(job_id)
    progress = store.progress(job_id)
    replicas = []
    for r in store.replicas(job_id):
        name = f"{r['role']}-{r['idx']}"
        sample = samples.get(name) if r["state"] == "Running" else None
        prog = progress.get(name)
        if prog is not None and (prog["attempt"] != r["attempt"] or r["state"] != "Running"):
            prog = None
        replicas.append({
            "role": r["role"],
            "index": r["idx"],
            "name": name,
            "state": r["state"],
            "pid": r["pid"],
            "port": r["port"],
            "host": r["host"],
            "node": r["node"],
            "exit_code": r["exit_code"],
            "attempt": r["attempt"],
            "started_at": r["started_at"],
            "finished_at": r["finished_at"],
            "cpu_percent": sample["cpu_percent"] if sample else None,
            "rss_bytes": sample["rss_bytes"] if sample else None,
            "progress": {k: prog[k] for k in ("epoch", "epochs", "step", "steps", "steps_per_sec")} if prog else None,
            "last_metrics": per_replica.get(name),
            "log": r["log_path"],
        })
    heartbeat = job.heartbeat_at
    running = not job.is_terminal
    return {
        "id": job.id,
        "name": job.name,
        "state": job.state,
        "backend": job.backend,
        "format": job.format,
        "restarts": job.restarts,
        "attempt": max((r["attempt"] for r in replicas), default=0),
        "output_dir": job.output_dir,
        "job_dir": str(job.job_dir),
        "spec_path": job.spec_path,
        "created_at": job.created_at,
        "started_at": job.started_at,
        "finished_at": job.finished_at,
        "duration_seconds": _duration(job) or 0.0,
        "message": printable(job.message) if job.message else job.message,
        "supervisor_pid": job.supervisor_pid,
        "heartbeat_age_seconds": round(time.time() - heartbeat, 1) if heartbeat and running else None,
        "trainer_args": list(job.run.trainer_args),
        "inject_failures": list(job.run.inject_failures),
        "epoch": last.get("epoch") if last else None,
        "epochs": last.get("epochs") if last else None,
        "images_per_sec": last.get("images_per_sec") if last else None,
        "last_metrics": last,
        "last_metric_values": metric_values(last) if last else None,
        "final_metrics": finals[-1]["data"] if finals else None,
        "eval_metrics": evals[-1]["data"] if evals else None,
        "replicas": replicas,
    }


def job_rows(store: Store, limit: int | None = None) -> list[dict]:
    """One row per job for ``multiworker list``, newest first, with Lost detection applied."""
    jobs = store.list_jobs(limit)
    for i, job in enumerate(jobs):
        if not job.is_terminal:
            jobs[i] = refresh_liveness(store, job.id)
    counts = store.replica_summary()
    now = time.time()
    rows = []
    for job in jobs:
        by_state = counts.get(job.id, {})
        total = sum(by_state.values()) or _desired_replicas(job)
        rows.append({
            "id": job.id,
            "name": job.name,
            "state": job.state,
            "replicas": total,
            "running": by_state.get("Running", 0),
            "replica_states": by_state,
            "restarts": job.restarts,
            "created_at": job.created_at,
            "age_seconds": round(now - job.created_at, 1),
            "started_at": job.started_at,
            "finished_at": job.finished_at,
            "duration_seconds": _duration(job),
            "study": job.run.study,  # a tuning trial's study
        })
    return rows


def _desired_replicas(job: JobRecord) -> int:
    return sum(int(p.get("replicas", 1)) for p in job.spec_dict.get("pools", {}).values())


REDACTED = "<redacted>"


def redact_env(spec: dict) -> dict:
    """The spec with every env value hidden (they often hold API keys); names stay, to debug with."""
    def hide(env):
        return {name: REDACTED for name in env} if isinstance(env, dict) else env

    out = {**spec, "env": hide(spec.get("env"))} if "env" in spec else dict(spec)
    if isinstance(spec.get("pools"), dict):
        out["pools"] = {role: ({**pool, "env": hide(pool["env"])} if isinstance(pool, dict) and "env" in pool else pool)
                        for role, pool in spec["pools"].items()}
    return out


def describe_job(store: Store, job_id: str) -> dict:
    """``multiworker describe``: the resolved spec, options, attempts, replicas and every event."""
    status = job_status(store, job_id)
    job = store.get_job(job_id)
    return {
        "status": {k: v for k, v in status.items() if k != "replicas"},
        "spec": redact_env(job.spec_dict),
        "options": {**job.run.to_dict(), "backend_options": job.backend_options},
        "attempts": store.attempts(job_id),
        "replicas": status["replicas"],
        "events": [{**{k: e[k] for k in ("id", "ts", "type", "reason", "replica")},
                    "message": printable(e["message"]) if e["message"] else e["message"]} for e in store.events(job_id)],
    }
