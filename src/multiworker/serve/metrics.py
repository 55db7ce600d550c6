"""Request and batching metrics of a model server, as JSON and as Prometheus text.

Counters by API and status code, a latency histogram (plus exact p50/p99 over recent requests),
batch sizes (rows per model call) and requests per batch, queue depth, and the model load time.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections import Counter, deque
from collections.abc import Callable

__all__ = ["Metrics"]

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
_RECENT = 10_000


class _Histogram:
    def __init__(self, buckets: tuple[float, ...]):
        self.buckets = buckets
        self.counts = [0] * (len(buckets) + 1)
        self.total = 0.0
        self.n = 0
        self.max = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.buckets, value)] += 1
        self.total += value
        self.n += 1
        self.max = max(self.max, value)

    def doc(self) -> dict:
        return {"count": self.n, "sum": self.total, "max": self.max,
                "mean": self.total / self.n if self.n else 0.0,
                "buckets": {str(b): c for b, c in zip((*self.buckets, "+Inf"), self.counts)}}

    def prometheus(self, name: str, labels: str = "") -> list[str]:
        sep = "," if labels else ""
        lines, running = [], 0
        for bound, count in zip((*self.buckets, "+Inf"), self.counts):
            running += count
            lines.append(f'{name}_bucket{{{labels}{sep}le="{bound}"}} {running}')
        suffix = f"{{{labels}}}" if labels else ""
        return [*lines, f"{name}_sum{suffix} {self.total}", f"{name}_count{suffix} {self.n}"]


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


class Metrics:
    """Thread-safe counters for one served model."""

    def __init__(self, model: str, version: int, load_seconds: float, queue_depth: Callable[[], int] = lambda: 0):
        self.model, self.version, self.load_seconds = model, version, load_seconds
        self.started = time.time()
        self._queue_depth = queue_depth
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, int]] = Counter()
        self._latency = _Histogram(LATENCY_BUCKETS)
        self._recent: deque[float] = deque(maxlen=_RECENT)
        self._batch_rows = _Histogram(BATCH_BUCKETS)
        self._batch_requests = _Histogram(BATCH_BUCKETS)

    def request(self, api: str, status: int, seconds: float) -> None:
        with self._lock:
            self._requests[(api, status)] += 1
            if status < 400:
                self._latency.observe(seconds)
                self._recent.append(seconds)

    def batch(self, requests: int, rows: int) -> None:
        with self._lock:
            self._batch_requests.observe(requests)
            self._batch_rows.observe(rows)

    def doc(self) -> dict:
        with self._lock:
            recent = sorted(self._recent)
            total = sum(self._requests.values())
            errors = sum(n for (_, status), n in self._requests.items() if status >= 400)
            return {
                "model": self.model, "version": str(self.version),
                "load_seconds": round(self.load_seconds, 3), "uptime_seconds": round(time.time() - self.started, 1),
                "requests": {"total": total, "errors": errors,
                             "by_api": [{"api": a, "status": s, "count": n} for (a, s), n in sorted(self._requests.items())]},
                "latency_seconds": {**self._latency.doc(), "p50": _quantile(recent, 0.50), "p99": _quantile(recent, 0.99)},
                "batch_size": self._batch_rows.doc(),
                "requests_per_batch": self._batch_requests.doc(),
                "queue_depth": self._queue_depth(),
            }

    def prometheus(self) -> str:
        model = f'model_name="{self.model}"'
        with self._lock:
            lines = [
                "# TYPE multiworker_serve_model_load_seconds gauge",
                f'multiworker_serve_model_load_seconds{{{model},version="{self.version}"}} {self.load_seconds}',
                "# TYPE multiworker_serve_requests_total counter",
                *(f'multiworker_serve_requests_total{{{model},api="{a}",status="{s}"}} {n}'
                  for (a, s), n in sorted(self._requests.items())),
                "# TYPE multiworker_serve_request_latency_seconds histogram",
                *self._latency.prometheus("multiworker_serve_request_latency_seconds", model),
                "# TYPE multiworker_serve_batch_size histogram",
                *self._batch_rows.prometheus("multiworker_serve_batch_size", model),
                "# TYPE multiworker_serve_requests_per_batch histogram",
                *self._batch_requests.prometheus("multiworker_serve_requests_per_batch", model),
                "# TYPE multiworker_serve_queue_depth gauge",
                f"multiworker_serve_queue_depth{{{model}}} {self._queue_depth()}",
            ]
        return "\n".join(lines) + "\n"
