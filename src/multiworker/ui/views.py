"""The documents behind the dashboard's pages, built from the read path the terminal commands use
(``status.job_rows``/``describe_job``, ``plot.collect_series``), shaped for the browser and cached
briefly so several open browsers cost one store read."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from multiworker.errors import JobNotFound
from multiworker.job import JobState, Store
from multiworker.metrics_line import RATE_KEYS
from multiworker.monitor.format import headline_metrics
from multiworker.monitor.plot import collect_series
from multiworker.status import describe_job, job_rows, primary_name

__all__ = ["Views", "downsample", "failure_summary", "pick_headline"]

log = logging.getLogger(__name__)

_ROOT_CAUSE = re.compile(r"root cause: (\S+) ")


def downsample(points: list[list[float]], max_points: int) -> list[list[float]]:
    """At most about ``max_points`` of an x-ordered line: each bucket keeps its lowest and highest
    point (in order), so spikes survive; the first and last points are always kept."""
    n = len(points)
    if n <= max_points or max_points < 4:
        return points
    buckets = max(1, (max_points - 2) // 2)
    size = (n - 2) / buckets
    out = [points[0]]
    for b in range(buckets):
        start, end = 1 + int(b * size), 1 + int((b + 1) * size)
        if start >= end:
            continue
        lo = min(range(start, end), key=lambda i: points[i][1])
        hi = max(range(start, end), key=lambda i: points[i][1])
        out.extend(points[i] for i in sorted({lo, hi}))
    out.append(points[-1])
    return out


def pick_headline(data: dict | None) -> dict | None:
    """The one number a jobs table shows: an accuracy if there is one, else a loss, else the first
    (never bookkeeping nor a rate such as images/s)."""
    numbers = {k: v for k, v in headline_metrics(data).items() if k not in RATE_KEYS}
    if not numbers:
        return None
    for word in ("accuracy", "loss", "rmse", "auc"):
        for key, value in numbers.items():
            if word in key:
                return {"name": key, "value": value}
    key = next(iter(numbers))
    return {"name": key, "value": numbers[key]}


def failure_summary(status: dict) -> dict | None:
    """For a Failed or Lost job: its message, the root-cause replica, and that replica's traceback tail
    (the ``  | `` lines of the launcher's summary)."""
    if status["state"] not in (JobState.FAILED, JobState.LOST) or not status.get("message"):
        return None
    message = status["message"]
    match = _ROOT_CAUSE.search(message)
    lines = message.splitlines()
    return {
        "message": lines[0],
        "root_cause": match.group(1) if match else None,
        "traceback": [line[4:] for line in lines if line.startswith("  | ")],
        "details": [line.strip() for line in lines[1:] if not line.startswith("  | ")],
    }


class _TTLCache:
    """A small thread-safe cache of computed values with an age limit (``ttl=None``: forever)."""

    def __init__(self, max_entries: int = 2000):
        self._lock = threading.Lock()
        self._data: dict[Any, tuple[float, Any]] = {}
        self._max = max_entries

    def get(self, key: Any, ttl: float | None, compute: Callable[[], Any]) -> Any:
        now = time.monotonic()
        with self._lock:
            hit = self._data.get(key)
        if hit is not None and (ttl is None or now - hit[0] < ttl):
            return hit[1]
        value = compute()
        with self._lock:
            if len(self._data) >= self._max:
                self._data.clear()
            self._data[key] = (now, value)
        return value

    def drop(self, match: Callable[[Any], bool]) -> None:
        with self._lock:
            for key in [k for k in self._data if match(k)]:
                del self._data[key]


class Views:
    """Builds each page's JSON from the store at ``home``; one Store per call (threads share nothing)."""

    def __init__(self, home: Path | None = None, *, ttl: float = 0.5):
        self.home = home
        self.ttl = ttl
        self._cache = _TTLCache()

    def store(self) -> Store:
        return Store(self.home)

    def _with_store(self, fn: Callable[[Store], Any]) -> Any:
        store = self.store()
        try:
            return fn(store)
        finally:
            store.close()

    def has_job(self, job_id: str) -> bool:
        return self._with_store(lambda s: s.has_job(job_id))

    # -- jobs -----------------------------------------------------------------------------
    def jobs(self, limit: int = 500) -> list[dict]:
        """Every job (newest first) as ``multiworker list`` sees it, with its headline metric."""
        return self._cache.get(("jobs", limit), self.ttl, lambda: self._with_store(lambda s: self._jobs(s, limit)))

    def _jobs(self, store: Store, limit: int) -> list[dict]:
        rows = job_rows(store, limit)
        for row in rows:
            terminal = JobState(row["state"]).is_terminal
            # A finished job's headline never changes: keep it; a running one's is read again.
            row["headline"] = self._cache.get(("headline", row["id"], row["state"]), None if terminal else self.ttl,
                                              lambda job_id=row["id"]: self._headline(store, job_id))
        backends = {j.id: j.backend for j in store.list_jobs(limit)}
        for row in rows:
            row["backend"] = backends.get(row["id"], "local")
        return rows

    def _headline(self, store: Store, job_id: str) -> dict | None:
        final = store.metrics(job_id, "final")
        if final:
            return pick_headline(final[-1]["data"])
        primary = primary_name(store.get_job(job_id))
        epochs = store.metrics(job_id, "epoch")
        mine = [m for m in epochs if m["replica"] == primary] or epochs
        return pick_headline(mine[-1]["data"]) if mine else None

    # -- one job -----------------------------------------------------------------------------
    def job(self, job_id: str) -> dict:
        """``describe``'s document plus what the job page shows beside it."""
        return self._cache.get(("job", job_id), self.ttl, lambda: self._with_store(lambda s: self._job(s, job_id)))

    def _job(self, store: Store, job_id: str) -> dict:
        doc = describe_job(store, job_id)
        doc["spec_yaml"] = yaml.safe_dump(doc["spec"], sort_keys=False, default_flow_style=False)
        doc["failure"] = failure_summary(doc["status"])
        doc["final_headline"] = headline_metrics(doc["status"]["final_metrics"]) or None
        output = doc["status"].get("output_dir")
        doc["output_exists"] = bool(output) and Path(output).is_dir()
        doc["tensorboard_logdir_exists"] = bool(output) and (Path(output) / "logs").is_dir()
        doc["primary"] = primary_name(store.get_job(job_id))
        doc["now"] = time.time()
        return doc

    def series(self, job_id: str, max_points: int = 1000) -> dict:
        """``plot``'s series, each line cut to about ``max_points`` for the browser."""
        def build(store: Store) -> dict:
            data = collect_series(store, job_id)
            total = sum(len(p) for p in data["cpu_percent"].values())
            for key in ("cpu_percent", "memory_mib"):
                data[key] = {r: downsample(p, max_points) for r, p in data[key].items()}
            data["epoch_metrics"] = {m: {r: downsample(p, max_points) for r, p in reps.items()}
                                     for m, reps in data["epoch_metrics"].items()}
            data["samples_total"] = total
            return data

        return self._cache.get(("series", job_id, max_points), self.ttl, lambda: self._with_store(build))

    def compare(self, job_ids: list[str], max_points: int = 1000) -> dict:
        """Each job's per-epoch curves from the replica that speaks for it (chief, else worker-0)."""
        def build(store: Store) -> dict:
            missing = [j for j in job_ids if not store.has_job(j)]
            if missing:
                raise JobNotFound(f"no job {', '.join(missing)}")
            jobs, names = [], set()
            for job_id in job_ids:
                data = collect_series(store, job_id)
                primary = primary_name(store.get_job(job_id))
                metrics = {}
                for metric, reps in data["epoch_metrics"].items():
                    points = reps.get(primary) or next(iter(reps.values()))
                    metrics[metric] = downsample(points, max_points)
                names.update(metrics)
                jobs.append({"id": job_id, "name": data["name"], "state": data["state"], "metrics": metrics})
            return {"jobs": jobs, "metrics": sorted(names)}

        return self._with_store(build)

    def forget(self, job_id: str) -> None:
        """Drop what is cached about a job (after an action changed it)."""
        self._cache.drop(lambda key: key[0] == "jobs" or (len(key) > 1 and key[1] == job_id))
