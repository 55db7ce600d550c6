"""Mirror a JobSet or TFJob into the job's records: the object's state and restarts, each pod's phase,
exit code, attempt and node, Kubernetes events, and every pod's log into the per-attempt log layout
(metric lines into the store), so ``status``, ``watch``, ``logs`` and ``plot`` read it like a local job."""

from __future__ import annotations

import json
import logging
import queue
import time
from typing import Any

from multiworker.backends.kubernetes.api import Cluster, Kind
from multiworker.backends.kubernetes.watch import LogFollower, Watcher
from multiworker.cluster import ReplicaId
from multiworker.job import JobState, Journal, ReplicaState
from multiworker.spec.formats.tfjob import CONTAINER

__all__ = ["Mirror", "object_state", "pod_replica"]

log = logging.getLogger(__name__)

_TFJOB_ROLES = {"chief": "chief", "master": "chief", "worker": "worker", "ps": "ps", "evaluator": "evaluator"}


def object_state(kind: Kind, obj: dict) -> tuple[JobState | None, str, int]:
    """(terminal state or Restarting/Running or None, message, restarts) from a JobSet's or TFJob's status."""
    status = obj.get("status") or {}
    true = [c for c in status.get("conditions") or [] if c.get("status") == "True"]
    if kind.api == "jobset":  # conditions Completed / Failed (jobset_types.go JobSetConditionType)
        for cond in true:
            if cond.get("type") in ("Completed", "Failed"):
                state = JobState.SUCCEEDED if cond["type"] == "Completed" else JobState.FAILED
                return state, cond.get("message") or cond.get("reason", ""), int(status.get("restarts") or 0)
        return None, "", int(status.get("restarts") or 0)
    by_type = {c.get("type"): c for c in true}  # TFJob: Created, Running, Restarting, Succeeded, Failed
    for name, state in (("Succeeded", JobState.SUCCEEDED), ("Failed", JobState.FAILED),
                        ("Restarting", JobState.RESTARTING), ("Running", JobState.RUNNING)):
        if name in by_type:
            return state, by_type[name].get("message", ""), 0
    return None, "", 0


def pod_replica(kind: Kind, pod: dict) -> tuple[ReplicaId, int] | None:
    """(replica, attempt) of a pod from its labels; attempt = JobSet restart + the container's restarts."""
    meta = pod.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    role = labels.get(kind.role_label, "")
    role = _TFJOB_ROLES.get(role.lower()) if kind.api == "tfjob" else role
    index = labels.get(kind.index_label, notes.get(kind.index_label))
    if role not in _TFJOB_ROLES.values() or index is None or not str(index).isdigit():
        return None
    attempt = int(labels.get(kind.attempt_label, notes.get(kind.attempt_label, 0)) or 0) if kind.attempt_label else 0
    container = _container_status(pod) or {}
    return ReplicaId(role, int(index)), attempt + int(container.get("restartCount") or 0)


def _container_status(pod: dict) -> dict | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == CONTAINER), statuses[0] if statuses else None)


class Mirror:
    """Runs in the driving process until the object ends, recording through the job's journal."""

    def __init__(self, journal: Journal, cluster: Cluster, kind: Kind, handle: dict, *, watch_timeout: int = 30):
        self.journal, self.cluster, self.kind = journal, cluster, kind
        self.namespace, self.name = handle["namespace"], handle["name"]
        job = journal.record
        self.layout = job.layout
        self.queue: queue.Queue = queue.Queue()
        self.watch_timeout = watch_timeout
        self.pods: dict[str, tuple[ReplicaId, int]] = {}  # pod name -> (replica, attempt)
        self.followers: dict[tuple[str, int], LogFollower] = {}
        self.seen_events: set[tuple[str, Any]] = set()
        self.exited: set[tuple[str, int]] = set()
        self.attempt = 0
        self.restarts = job.restarts
        self.final: tuple[JobState, str] | None = None
        self.watchers: list[Watcher] = []

    # -- the loop -----------------------------------------------------------------------------
    def run(self) -> JobState:
        self._start_watchers()
        self.journal.start_attempt(0)
        try:
            while self.final is None:
                self._drain(0.5)
                self._tick()
            self._finish_logs()
        finally:
            for w in self.watchers:
                w.stop()
        state, message = self.final
        return self._record_final(state, message)

    def _start_watchers(self) -> None:
        core, custom, k = self.cluster.core, self.cluster.custom, self.kind
        prefix = f"{self.name}-"

        def ours(ev: dict) -> bool:
            name = (ev.get("involvedObject") or {}).get("name", "")
            return name == self.name or name.startswith(prefix)

        self.watchers = [
            Watcher("object", custom.list_namespaced_custom_object, self.queue, timeout=self.watch_timeout,
                    group=k.group, version=k.version, namespace=self.namespace, plural=k.plural,
                    field_selector=f"metadata.name={self.name}"),
            Watcher("pod", core.list_namespaced_pod, self.queue, timeout=self.watch_timeout,
                    namespace=self.namespace, label_selector=f"{k.owner_label}={self.name}"),
            Watcher("event", core.list_namespaced_event, self.queue, timeout=self.watch_timeout, accept=ours,
                    namespace=self.namespace),
        ]
        for w in self.watchers:
            w.start()

    def _drain(self, wait: float) -> None:
        try:
            item = self.queue.get(timeout=wait)
        except queue.Empty:
            return
        while True:
            self._handle(item)
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return

    def _handle(self, item: tuple) -> None:
        topic, kind, payload = item[0], item[1], item[2]
        if topic == "line":
            self._line(item[1], item[2], item[3])
        elif kind == "ERROR":
            raise self.cluster.error(payload, f"watch {topic}s of {self.kind.kind} {self.namespace}/{self.name}",
                                     namespace=self.namespace)
        else:
            for obj in (payload if kind == "SYNC" else [payload]):
                getattr(self, f"_on_{topic}")(obj, deleted=kind == "DELETED")

    def _tick(self) -> None:
        self.journal.tick()
        if self.journal.stop_signal is not None and self.final is None:
            from multiworker.backends.kubernetes.api import delete_object

            delete_object(self.cluster, self.kind, self.namespace, self.name)
            self.final = (JobState.CANCELLED, f"cancelled by {self.journal.stop_name}; the {self.kind.kind} and its "
                          "pods were deleted")
        elif (current := self.journal.current()).is_terminal:  # cancelled from elsewhere
            self.final = (JobState.CANCELLED, current.message or "cancelled")

    # -- objects ------------------------------------------------------------------------------
    def _on_object(self, obj: dict, *, deleted: bool) -> None:
        if deleted:
            if self.final is None:
                self.final = (JobState.CANCELLED, f"the {self.kind.kind} was deleted (multiworker cancel or kubectl delete)")
            return
        state, message, restarts = object_state(self.kind, obj)
        self._restarts(restarts)
        if state is not None and state.is_terminal:
            self.final = (state, message)
        elif state is JobState.RESTARTING:
            self.journal.set_state(state)

    def _on_pod(self, pod: dict, *, deleted: bool) -> None:
        found = pod_replica(self.kind, pod)
        if found is None:
            return
        rid, attempt = found
        name = pod["metadata"]["name"]
        self.pods[name] = (rid, attempt)
        self._restarts(attempt)
        if deleted or (self.kind.attempt_label and attempt < self.attempt):
            return  # a pod of an earlier JobSet attempt, going away (TFJob pods restart in place)
        status = pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        container = _container_status(pod) or {}
        terminated = (container.get("state") or {}).get("terminated")
        fields: dict[str, Any] = {"attempt": attempt, "node": (pod.get("spec") or {}).get("nodeName"),
                                  "host": status.get("podIP"),
                                  "log_path": str(self.layout.replica_log(attempt, rid.name)),
                                  "exit_code": terminated.get("exitCode") if terminated else None}
        if terminated:
            self._exited(rid, attempt, terminated)
        self.journal.replica(rid, ReplicaState.of(phase), **fields)
        current = self.journal.current()
        if phase == "Running" and current.state in (JobState.PENDING, JobState.RESTARTING):
            self.journal.set_state(JobState.RUNNING, started_at=current.started_at or time.time())
        running = (container.get("state") or {}).get("running") or terminated
        if running:
            self._follow(name, rid, attempt)

    def _exited(self, rid: ReplicaId, attempt: int, terminated: dict) -> None:
        if (rid.name, attempt) in self.exited:
            return
        self.exited.add((rid.name, attempt))
        code = terminated.get("exitCode")
        reason = terminated.get("reason") or ""
        self._event("ExitedWithCode", f"exited with code {code}" + (f" ({reason})" if reason else "")
                    + f" in attempt {attempt}", replica=rid.name, warning=code not in (0, None))

    def _on_event(self, ev: dict, *, deleted: bool) -> None:
        key = ((ev.get("metadata") or {}).get("uid") or ev["metadata"].get("name"), ev.get("count"))
        if deleted or key in self.seen_events:
            return
        self.seen_events.add(key)
        involved = ev.get("involvedObject") or {}
        replica = self.pods.get(involved.get("name", ""), (None,))[0]
        message = f"{involved.get('kind', '')}/{involved.get('name', '')}: {ev.get('message', '')}"
        self._event(ev.get("reason") or "Event", message, replica=replica.name if replica else None,
                    warning=ev.get("type") == "Warning")

    def _restarts(self, n: int) -> None:
        """A new attempt: the platform restarted the group (JobSet) or a container (TFJob)."""
        if n <= self.attempt:
            return
        self.journal.end_attempt(self.attempt, "Restarting")
        self.attempt = n
        self.restarts = max(self.restarts, n)
        self.journal.start_attempt(n)
        self.journal.set_restarts(self.restarts)
        self._event("Restarting", f"{self.kind.kind} {self.name} restarted; attempt {n}", warning=True)

    # -- logs ---------------------------------------------------------------------------------
    def _follow(self, pod: str, rid: ReplicaId, attempt: int) -> None:
        key = (pod, attempt)
        current = self.followers.get(key)
        if current is not None and not (current.failed is not None and current.bytes == 0):
            return
        follower = LogFollower(self.cluster.core, self.namespace, pod, CONTAINER,
                               self.layout.replica_log(attempt, rid.name), replica=rid.name, attempt=attempt,
                               out=self.queue)
        self.followers[key] = follower
        follower.start()

    def _line(self, replica: str, attempt: int, text: str) -> None:
        self.journal.feed(replica, text.encode() + b"\n", attempt=attempt)  # TFJob replicas restart one by one

    def _finish_logs(self, grace: float = 10.0) -> None:
        """Final pod states, then the rest of every log (finished containers' streams end by themselves)."""
        try:
            response = self.cluster.core.list_namespaced_pod(
                self.namespace, label_selector=f"{self.kind.owner_label}={self.name}", _preload_content=False)
            for pod in json.loads(response.data).get("items", []):
                self._on_pod(pod, deleted=False)
        except Exception as exc:  # noqa: BLE001 - the final view is best effort; the state is known
            log.info("final pod list: %s", exc)
        start = time.monotonic()
        deadline = start + grace
        while time.monotonic() < deadline and (time.monotonic() < start + 1.0  # events recorded with the end
                                               or any(f.is_alive() for f in self.followers.values())):
            self._drain(0.1)
        self._drain(0.0)

    def _record_final(self, state: JobState, message: str) -> JobState:
        self.journal.end_attempt(self.attempt, state.value)
        return self.journal.finish(state, message or f"{self.kind.kind} {self.name}: {state.value}",
                                   restarts=self.restarts)

    def _event(self, reason: str, message: str, *, replica: str | None = None, warning: bool = False) -> None:
        self.journal.event(reason, message, replica=replica, warning=warning)
