"""Cloud Logging -> the per-replica log layout.

Vertex AI writes each task's output as entries of resource type ``ml_job`` labelled with the job's
numeric id and the task (``workerpool0-0``...), as gcloud's ``ai custom-jobs stream-logs`` reads them
(googlecloudsdk/command_lib/ai/log_util.py: the same filter, ``jsonPayload.message`` else
``textPayload``). Entries arrive late and out of order, so each read looks back a window and skips
the insertIds already written.
"""

from __future__ import annotations

import datetime as dt
import logging
import re

from multiworker.job import LogLayout

__all__ = ["LogReader", "entry_text"]

log = logging.getLogger(__name__)

LOOKBACK = dt.timedelta(minutes=5)


def entry_text(entry: dict) -> str:
    """The message of one LogEntry: ``jsonPayload.message``, else ``textPayload``."""
    payload = entry.get("jsonPayload")
    if isinstance(payload, dict):
        return str(payload.get("message") or "")
    return str(entry.get("textPayload") or "")


_TS = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?$")


def _parse(ts: str) -> dt.datetime:
    """An RFC 3339 timestamp (up to nanoseconds, as Cloud Logging writes them) as an aware datetime."""
    match = _TS.match(ts)
    if not match:
        return dt.datetime.now(dt.UTC)
    zone = match.group(3) or "Z"
    text = f"{match.group(1)}.{(match.group(2) or '0')[:6].ljust(6, '0')}{'+00:00' if zone == 'Z' else zone}"
    return dt.datetime.fromisoformat(text)


class LogReader:
    """Appends a CustomJob's new Cloud Logging entries to ``attempt_0/<replica>.log`` per task; entries
    without a known task (the service's own) go to the job's supervisor.log with a ``[vertex]`` prefix."""

    def __init__(self, cloud, layout: LogLayout, *, job_number: str, tasks: dict[str, str], attempt: int = 0):
        self.cloud = cloud
        self.layout = layout
        self.job_number = job_number
        self.tasks = tasks
        self.attempt = attempt
        self.since: dt.datetime | None = None
        self.seen: dict[str, dt.datetime] = {}
        self.active: set[str] = set()  # replicas that have written at least one line

    def _filter(self) -> str:
        parts = ['resource.type="ml_job"', f'resource.labels.job_id="{self.job_number}"']
        if self.since is not None:
            start = (self.since - LOOKBACK).astimezone(dt.UTC)
            parts.append(f'timestamp>="{start.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}"')
        return " AND ".join(parts)

    def poll(self) -> dict[str, list[str]]:
        """Read every new entry; append it to its replica's log; return the new lines per replica."""
        token, new = None, {}
        query = self._filter()
        while True:
            page = self.cloud.list_entries(query, token)
            for entry in page.get("entries", []):
                key = entry.get("insertId") or f"{entry.get('timestamp')}/{entry_text(entry)}"
                if key in self.seen:
                    continue
                ts = _parse(entry.get("timestamp") or "")
                self.seen[key] = ts
                self.since = ts if self.since is None or ts > self.since else self.since
                task = ((entry.get("resource") or {}).get("labels") or {}).get("task_name", "")
                new.setdefault(self.tasks.get(task, ""), []).extend(entry_text(entry).splitlines() or [""])
            token = page.get("nextPageToken")
            if not token:
                break
        if self.since is not None:
            horizon = self.since - 2 * LOOKBACK
            self.seen = {k: t for k, t in self.seen.items() if t >= horizon}
        self._write(new)
        return {k: v for k, v in new.items() if k}

    def _write(self, new: dict[str, list[str]]) -> None:
        for replica, lines in new.items():
            if replica:
                path = self.layout.replica_log(self.attempt, replica)
                self.active.add(replica)
            else:
                path, lines = self.layout.supervisor_log, [f"[vertex] {line}" for line in lines]
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as f:
                f.write("".join(f"{line}\n" for line in lines))
