"""The Kubernetes backend: a job becomes a JobSet (default) or a Kubeflow TFJob; Kubernetes restarts
it; this backend creates the object, then mirrors its state, pods, events and logs into the store.

Options (``backend_options``): ``namespace``, ``context`` (kubeconfig context), ``kubernetes_api``
(``jobset`` | ``tfjob``), ``image`` (for pools without one). The ``kubernetes`` package is imported
only when a job uses this backend (``pip install 'multiworker[kubernetes]'``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from multiworker.backends.base import Backend, JobState
from multiworker.backends.kubernetes.manifest import build, check_paths
from multiworker.errors import MultiworkerError

if TYPE_CHECKING:  # pragma: no cover
    from multiworker.backends.kubernetes.api import Cluster, Kind
    from multiworker.spec.load import LoadedSpec
    from multiworker.store import Store

__all__ = ["KubernetesBackend", "delete_object", "backend_options"]

log = logging.getLogger(__name__)


def backend_options(job: dict) -> dict[str, Any]:
    """The job's backend options as recorded in ``options_json``."""
    options = json.loads(job.get("options_json") or "{}")
    return dict(options.get("backend_options") or {})


def delete_object(cluster: "Cluster", kind: "Kind", namespace: str, name: str) -> None:
    """Delete the object (Foreground: its Jobs and pods first) and any pod left with its label."""
    from kubernetes.client.exceptions import ApiException

    try:
        cluster.custom.delete_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, name,
                                                       propagation_policy="Foreground")
    except ApiException as exc:
        if exc.status != 404:
            raise cluster.error(exc, f"delete {kind.kind} {namespace}/{name}", kind=kind, namespace=namespace) from exc
    except Exception as exc:  # noqa: BLE001 - connection errors
        raise cluster.error(exc, f"delete {kind.kind} {namespace}/{name}") from exc
    try:
        cluster.core.delete_collection_namespaced_pod(namespace, label_selector=f"{kind.owner_label}={name}",
                                                      grace_period_seconds=0)
    except Exception as exc:  # noqa: BLE001 - the garbage collector removes them anyway
        log.info("deleting pods of %s: %s", name, exc)


def _with_trainer_args(spec, job: dict):
    """Arguments given after ``--`` on ``multiworker run`` go to every pool, as they do locally."""
    extra = json.loads(job.get("options_json") or "{}").get("trainer_args") or []
    if not extra:
        return spec
    pools = {role: pool.model_copy(update={"args": list(spec.resolved(role).args or []) + extra})
             for role, pool in spec.pools.items()}
    return spec.model_copy(update={"pools": pools})


class KubernetesBackend(Backend):
    name = "kubernetes"
    extra = "kubernetes"
    supervised_here = False

    def check(self, loaded: "LoadedSpec", options: dict[str, Any]) -> list[str]:
        source = str(loaded.path)
        check_paths(loaded.spec, loaded.base_dir, source=source)
        _, notes = build(loaded.spec, options, job_id="0" * 8, source=source)
        return notes

    def run(self, store: "Store", job_id: str, observer: Any = None) -> JobState:
        from multiworker.backends.kubernetes.api import KINDS, connect
        from multiworker.backends.kubernetes.mirror import Mirror
        from multiworker.spec.model import JobSpec

        job = store.get_job(job_id)
        if JobState(job["state"]).is_terminal:
            return JobState(job["state"])
        options = backend_options(job)
        handle = json.loads(job.get("handle_json") or "null")
        try:
            cluster = connect(options.get("context"))
            if handle is None:
                spec = _with_trainer_args(JobSpec.model_validate_json(job["spec_json"]), job)
                handle = self._create(store, job, spec, options, cluster)
        except MultiworkerError as exc:
            if handle is None:  # nothing was created: the job ends here, not Pending forever
                store.update_job(job_id, state=JobState.FAILED.value, finished_at=time.time(), message=str(exc))
                store.add_event(job_id, "SubmitFailed", str(exc), warning=True)
            raise
        kind = KINDS[handle["api"]]
        if threading.current_thread() is threading.main_thread():  # SIGTERM reaches it: `cancel` may stop it
            store.update_job(job_id, supervisor_pid=os.getpid())
        store.update_job(job_id, heartbeat_at=time.time())
        return Mirror(store, job_id, cluster, kind, handle, observer,
                      watch_timeout=int(options.get("watch_timeout") or 30)).run()

    def _create(self, store: "Store", job: dict, spec, options: dict, cluster: "Cluster") -> dict:
        from multiworker.backends.kubernetes.api import KINDS

        namespace = options.get("namespace") or cluster.namespace
        doc, notes = build(spec, {**options, "namespace": namespace}, job_id=job["id"],
                           source=job.get("spec_path") or spec.name)
        kind = KINDS[options.get("kubernetes_api") or "jobset"]
        name = doc["metadata"]["name"]
        try:
            cluster.custom.create_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, doc)
        except Exception as exc:  # noqa: BLE001 - mapped to one line naming the cluster
            raise cluster.error(exc, f"create {kind.kind} {namespace}/{name}", kind=kind, namespace=namespace) from exc
        handle = {"api": kind.api, "namespace": namespace, "name": name, "context": cluster.context,
                  "server": cluster.server}
        Path(job["job_dir"], f"{kind.api}.json").write_text(json.dumps(doc, indent=2))
        store.update_job(job["id"], handle_json=json.dumps(handle))
        for note in notes:
            store.add_event(job["id"], "Note", note)
        store.add_event(job["id"], "Submitted", f"created {kind.kind} {namespace}/{name} on {cluster.where}")
        return handle

    def cancel(self, store: "Store", job: dict, *, timeout: float | None = None) -> dict:
        """Stop the driver if one runs (it deletes the object and records Cancelled), then make sure:
        delete the object and its pods here and record Cancelled if nothing did."""
        from multiworker.backends.driver import driver_alive, stop_driver
        from multiworker.backends.kubernetes.api import KINDS, connect

        if JobState(job["state"]).is_terminal:
            return job
        if job.get("supervisor_pid") and driver_alive(job):
            job = stop_driver(store, job, timeout)
        handle = json.loads(job.get("handle_json") or "null")
        if handle is not None:
            delete_object(connect(handle.get("context")), KINDS[handle["api"]], handle["namespace"], handle["name"])
        what = f"{handle['namespace']}/{handle['name']} and its pods" if handle else "nothing (never submitted)"
        store.end_job(job["id"], JobState.CANCELLED, f"cancelled by `multiworker cancel`; deleted {what}",
                      replica_state="Stopped")
        return store.get_job(job["id"])

    def reconcile(self, store: "Store", job: dict) -> dict:
        """A job whose driver is gone: read the object's state once (no logs), so status stays truthful."""
        from multiworker.backends.kubernetes.api import KINDS, connect
        from multiworker.backends.kubernetes.mirror import object_state
        from multiworker.backends.driver import driver_alive

        handle = json.loads(job.get("handle_json") or "null")
        if handle is None or JobState(job["state"]).is_terminal or driver_alive(job):
            return job
        try:
            cluster = connect(handle.get("context"))
            kind = KINDS[handle["api"]]
            obj = cluster.custom.get_namespaced_custom_object(kind.group, kind.version, handle["namespace"],
                                                              kind.plural, handle["name"])
        except Exception as exc:  # noqa: BLE001 - a reader never fails on a cluster it cannot reach
            log.info("reconcile %s: %s", job["id"], exc)
            return job
        state, message, restarts = object_state(kind, obj)
        if state is not None and state.is_terminal:
            store.update_job(job["id"], state=state.value, message=message, finished_at=time.time(),
                             restarts=max(restarts, job.get("restarts") or 0))
            store.add_event(job["id"], state.value, f"{message} (read after the driver was gone)")
        return store.get_job(job["id"])
