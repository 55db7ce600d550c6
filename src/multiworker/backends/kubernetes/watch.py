"""Background readers of the Kubernetes API: list-then-watch loops (resourceVersion, a relist after
410 Gone) and pod log followers. They only put what they read on a queue; the mirror's thread is the
one that writes the store."""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["Watcher", "LogFollower"]

log = logging.getLogger(__name__)


class Watcher(threading.Thread):
    """List ``list_fn(**kwargs)``, then watch from the list's resourceVersion; relist after 410 Gone.

    Puts ``(topic, "SYNC", [items])`` after every list and ``(topic, TYPE, object)`` for each change;
    ``(topic, "ERROR", exc)`` for an error it cannot recover from.
    """

    def __init__(self, topic: str, list_fn: Callable, out: queue.Queue, *, timeout: int = 30,
                 accept: Callable[[dict], bool] | None = None, **kwargs: Any):
        super().__init__(name=f"watch-{topic}", daemon=True)
        self.topic, self.list_fn, self.out, self.timeout, self.kwargs = topic, list_fn, out, timeout, kwargs
        self.accept = accept or (lambda obj: True)
        self.stopped = threading.Event()
        self.relists = 0

    def stop(self) -> None:
        self.stopped.set()

    def run(self) -> None:
        from kubernetes import watch
        from kubernetes.client.exceptions import ApiException

        version: str | None = None
        failures = 0
        while not self.stopped.is_set():
            try:
                if version is None:
                    version = self._list()
                stream = watch.Watch().stream(self.list_fn, resource_version=version, timeout_seconds=self.timeout,
                                              allow_watch_bookmarks=True, **self.kwargs)
                for event in stream:
                    obj = event["raw_object"]
                    version = obj.get("metadata", {}).get("resourceVersion") or version
                    if event["type"] != "BOOKMARK" and self.accept(obj):
                        self.out.put((self.topic, event["type"], obj))
                    if self.stopped.is_set():
                        break
                failures = 0
            except ApiException as exc:
                if exc.status == 410:  # the version was compacted away: start again from a fresh list
                    log.info("watch %s: 410 Gone at resourceVersion %s; relisting", self.topic, version)
                    version = None
                    continue
                failures += 1
                if exc.status in (401, 403, 404) or failures > 5:
                    self.out.put((self.topic, "ERROR", exc))
                    return
                self.stopped.wait(min(10.0, 0.5 * 2 ** failures))
            except Exception as exc:  # noqa: BLE001 - connection trouble: retry, then report
                failures += 1
                log.info("watch %s: %s (try %d)", self.topic, exc, failures)
                if failures > 5:
                    self.out.put((self.topic, "ERROR", exc))
                    return
                self.stopped.wait(min(10.0, 0.5 * 2 ** failures))

    def _list(self) -> str:
        response = self.list_fn(_preload_content=False, **self.kwargs)
        doc = json.loads(response.data)
        self.relists += 1
        self.out.put((self.topic, "SYNC", [o for o in doc.get("items", []) if self.accept(o)]))
        return doc["metadata"]["resourceVersion"]


class LogFollower(threading.Thread):
    """Follow one container run's log into ``path``; put ``("line", replica, attempt, text)`` per line."""

    def __init__(self, core: Any, namespace: str, pod: str, container: str, path: Path, *, replica: str,
                 attempt: int, out: queue.Queue, previous: bool = False):
        super().__init__(name=f"log-{pod}", daemon=True)
        self.core, self.namespace, self.pod, self.container = core, namespace, pod, container
        self.path, self.replica, self.attempt, self.out, self.previous = path, replica, attempt, out, previous
        self.bytes = 0
        self.failed: Exception | None = None
        self.finished_at: float | None = None

    def run(self) -> None:
        try:
            response = self.core.read_namespaced_pod_log(
                self.pod, self.namespace, container=self.container, follow=not self.previous,
                previous=self.previous, _preload_content=False)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            partial = b""
            with open(self.path, "ab") as f:
                for chunk in response.stream(64 * 1024):
                    f.write(chunk)
                    f.flush()
                    self.bytes += len(chunk)
                    *lines, partial = (partial + chunk).split(b"\n")
                    for raw in lines:
                        self._line(raw)
            if partial:
                self._line(partial)
            response.release_conn()
        except Exception as exc:  # noqa: BLE001 - the pod went away or its container has not started
            self.failed = exc
            log.debug("log of %s: %s", self.pod, exc)
        finally:
            self.finished_at = time.time()

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", "replace").rstrip("\r")
        if text:
            self.out.put(("line", self.replica, self.attempt, text))
