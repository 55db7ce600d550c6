"""Replica output into the store: split new log bytes into lines; ``MULTIWORKER_METRIC`` lines
become metrics (progress lines are kept to the latest per replica and written once a second), and
every other line goes to the observer (the console of a foreground run)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from multiworker.job.observer import Observer
from multiworker.metrics_line import PREFIX, BadMetric, parse_metric

__all__ = ["LogIngest"]

log = logging.getLogger(__name__)


class MetricSink(Protocol):
    """Where parsed metrics go (the journal)."""

    def add_metric(self, attempt: int, replica: str, metric: dict) -> None: ...

    def set_progress(self, attempt: int, progress: dict[str, dict]) -> None: ...


class LogIngest:
    """Line assembly and metric parsing for the replicas of one attempt."""

    def __init__(self, sink: MetricSink, observer: Observer, *, primary: str,
                 on_metric: Callable[[str, dict], None] | None = None):
        self.sink = sink
        self.obs = observer
        self.primary = primary  # the replica whose epoch lines speak for the job
        self.on_metric = on_metric  # e.g. fault injection at an epoch or step
        self.on_line: Callable[[str, str], None] | None = None  # every other line (Keras's progress bar...)
        self._bad_warned: set[str] = set()
        self.attempt = 0
        self._partial: dict[str, bytes] = {}
        self._progress: dict[str, dict] = {}

    def new_attempt(self, attempt: int) -> None:
        self.attempt = attempt
        self._partial = {}

    def feed(self, replica: str, data: bytes) -> None:
        """New output of ``replica``; only complete lines are handled (the rest waits for more)."""
        if not data:
            return
        *lines, self._partial[replica] = (self._partial.get(replica, b"") + data).replace(b"\r", b"\n").split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "replace").rstrip()
            if line:
                self._line(replica, line)

    def _line(self, replica: str, line: str) -> None:
        try:
            metric = parse_metric(line, strict=True)
        except BadMetric as exc:  # dropped with one warning per replica: a bad line must not end the job
            if replica not in self._bad_warned:
                self._bad_warned.add(replica)
                message = f"ignored a malformed {PREFIX.strip()} line ({exc}); later ones are dropped silently"
                log.warning("%s: %s", replica, message)
                self.obs.on_event("BadMetricLine", message, replica=replica, warning=True)
            return
        if metric is None:
            if self.on_line is not None:
                self.on_line(replica, line)
            self.obs.on_line(replica, line)
            return
        if self.on_metric is not None:
            self.on_metric(replica, metric)
        if metric["kind"] == "progress":
            self._progress[replica] = metric
        else:
            self.sink.add_metric(self.attempt, replica, metric)
        self.obs.on_metric(replica, metric, primary=replica == self.primary)

    def flush_progress(self) -> None:
        """Write the latest progress line of each replica seen since the last flush."""
        if self._progress:
            self.sink.set_progress(self.attempt, self._progress)
            self._progress = {}
