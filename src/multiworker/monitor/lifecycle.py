"""Ending and removing jobs: ``cancel`` (clean stop of a running job), ``delete`` and ``gc``."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from multiworker.backends.base import get_backend
from multiworker.errors import UserError
from multiworker.job import Store
from multiworker.staging import is_staged as sweep_match
from multiworker.staging import sweep
from multiworker.status import refresh_liveness

__all__ = ["cancel_job", "delete_job", "gc_jobs", "sweep_leftovers"]

log = logging.getLogger(__name__)


def cancel_job(store: Store, job_id: str, *, timeout: float | None = None) -> dict:
    """Stop a running job cleanly through its backend and return its record (state Cancelled, no
    replica left). A job that has already ended is returned unchanged."""
    job = store.get_job(job_id)
    if job.is_terminal:
        return job
    return get_backend(job.backend).cancel(store, job, timeout=timeout)


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def delete_job(store: Store, job_id: str, *, force: bool = False) -> dict:
    """Remove a finished job's records and its directory (logs, and the output when it lives there).

    A running job is refused unless ``force``, which cancels it first. An output directory the
    spec placed elsewhere is the user's and is kept.
    """
    job = refresh_liveness(store, job_id)
    if not job.is_terminal:
        if not force:
            raise UserError(f"job {job_id} is {job.state}; cancel it first (`multiworker cancel {job_id}`) "
                            "or pass --force")
        job = cancel_job(store, job_id)
    removed, kept = [], []
    job_dir = Path(job.job_dir) if job.job_dir else None
    if job_dir is not None and job_dir.exists():
        if _inside(job_dir, store.home / "jobs") and job_dir.resolve() != (store.home / "jobs").resolve():
            shutil.rmtree(job_dir)
            removed.append(str(job_dir))
        else:
            kept.append(str(job_dir))
    output = Path(job.output_dir) if job.output_dir else None
    if output is not None and output.exists() and (job_dir is None or not _inside(output, job_dir)):
        kept.append(str(output))
    store.delete_job(job_id)
    log.info("deleted job %s (removed %s, kept %s)", job_id, removed, kept)
    return {"id": job_id, "name": job.name, "state": job.state, "removed": removed, "kept": kept}


def gc_jobs(store: Store, older_than: float, *, dry_run: bool = False) -> list[dict]:
    """Delete jobs that ended more than ``older_than`` seconds ago; return what was (or would be) deleted."""
    for job in store.list_jobs():
        if not job.is_terminal:
            refresh_liveness(store, job.id)
    out = []
    for job in store.finished_before(time.time() - older_than):
        if dry_run:
            out.append({"id": job.id, "name": job.name, "state": job.state, "removed": [], "kept": []})
        else:
            out.append(delete_job(store, job.id))
    return out


def sweep_leftovers(store: Store, *, dry_run: bool = False) -> list[str]:
    """The temporary model and file copies (``*.tmp-<pid>-<hex>``) that writers killed mid-save left in
    the output directories of ended jobs: removed (or, with ``dry_run``, only listed)."""
    out: list[str] = []
    for job in store.list_jobs():
        if not job.is_terminal or not job.output_dir:
            continue
        if dry_run:
            out += [str(p) for p in Path(job.output_dir).rglob("*.*-*-*") if sweep_match(p.name)]
        else:
            out += sweep(Path(job.output_dir))
    return out
