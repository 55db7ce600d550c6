"""The Kubernetes backend: a job becomes a JobSet (default) or a Kubeflow TFJob; Kubernetes restarts
it; this backend creates the object, then mirrors its state, pods, events and logs into the store.

Options (``backend_options``): ``namespace``, ``context`` (kubeconfig context), ``kubernetes_api``
(``jobset`` | ``tfjob``), ``image`` (for pools without one). The ``kubernetes`` package is imported
only when a job uses this backend (``pip install 'multiworker[kubernetes]'``).
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from multiworker.backends.base import Backend, BackendOptions
from multiworker.backends.driver import driver_alive, stop_driver
from multiworker.backends.kubernetes.manifest import build, check_paths
from multiworker.errors import MultiworkerError
from multiworker.job import JobRecord, JobState, Journal, ReplicaState, Store

if TYPE_CHECKING:  # pragma: no cover
    from multiworker.backends.kubernetes.api import Cluster
    from multiworker.spec.load import LoadedSpec

__all__ = ["KubernetesBackend", "KubernetesOptions"]

log = logging.getLogger(__name__)


class KubernetesOptions(BackendOptions):
    namespace: str | None = Field(None, description="namespace (default: the context's)")
    context: str | None = Field(None, description="kubeconfig context (default: current)")
    kubernetes_api: Literal["jobset", "tfjob"] | None = Field(
        None, description="create a jobset (default) or a tfjob (needs the TFJob operator)")
    image: str | None = Field(None, description="the container image of pools that name none")
    watch_timeout: int = Field(30, gt=0, description="seconds a watch request stays open before it is renewed")

    def manifest_options(self) -> dict:
        return self.model_dump(include={"namespace", "kubernetes_api", "image"}, exclude_none=True)


def _with_trainer_args(spec, job: JobRecord):
    """Arguments given after ``--`` on ``multiworker run`` go to every pool, as they do locally."""
    extra = list(job.run.trainer_args)
    if not extra:
        return spec
    pools = {role: pool.model_copy(update={"args": list(spec.resolved(role).args or []) + extra})
             for role, pool in spec.pools.items()}
    return spec.model_copy(update={"pools": pools})


class KubernetesBackend(Backend):
    name = "kubernetes"
    extra = "kubernetes"
    supervised_here = False

    Options = KubernetesOptions

    def check(self, loaded: LoadedSpec, options: KubernetesOptions) -> list[str]:
        source = str(loaded.path)
        check_paths(loaded.spec, loaded.base_dir, source=source)
        _, notes = build(loaded.spec, options.manifest_options(), job_id="0" * 8, source=source)
        return notes

    def drive(self, record: JobRecord, options: KubernetesOptions, journal: Journal) -> JobState:
        from multiworker.backends.kubernetes.api import KINDS, connect
        from multiworker.backends.kubernetes.mirror import Mirror

        handle = record.handle or None
        try:
            cluster = connect(options.context)
            if handle is None:
                handle = self._create(record, options, cluster, journal)
        except MultiworkerError as exc:
            if handle is None:  # nothing was created: the job ends here (the template records Failed)
                journal.event("SubmitFailed", str(exc), warning=True)
            raise
        journal.platform_owned = True
        return Mirror(journal, cluster, KINDS[handle["api"]], handle, watch_timeout=options.watch_timeout).run()

    def _create(self, record: JobRecord, options: KubernetesOptions, cluster: Cluster, journal: Journal) -> dict:
        from multiworker.backends.kubernetes.api import KINDS

        spec = _with_trainer_args(record.spec, record)
        namespace = options.namespace or cluster.namespace
        doc, notes = build(spec, {**options.manifest_options(), "namespace": namespace}, job_id=record.id,
                           source=record.spec_path or spec.name)
        kind = KINDS[options.kubernetes_api or "jobset"]
        name = doc["metadata"]["name"]
        try:
            cluster.custom.create_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, doc)
        except Exception as exc:  # noqa: BLE001 - mapped to one line naming the cluster
            raise cluster.error(exc, f"create {kind.kind} {namespace}/{name}", kind=kind, namespace=namespace) from exc
        handle = {"api": kind.api, "namespace": namespace, "name": name, "context": cluster.context,
                  "server": cluster.server}
        (record.job_dir / f"{kind.api}.json").write_text(json.dumps(doc, indent=2))
        journal.set_handle(handle)
        for note in notes:
            journal.event("Note", note)
        journal.event("Submitted", f"created {kind.kind} {namespace}/{name} on {cluster.where}")
        return handle

    def cancel(self, store: Store, job: JobRecord, *, timeout: float | None = None) -> JobRecord:
        """Stop the driver if one runs (it deletes the object and records Cancelled), then make sure:
        delete the object and its pods here and record Cancelled if nothing did."""
        from multiworker.backends.kubernetes.api import KINDS, connect, delete_object

        if job.is_terminal:
            return job
        if job.supervisor_pid and driver_alive(job):
            job = stop_driver(store, job, timeout)
        handle = job.handle or None
        if handle is not None:
            delete_object(connect(handle.get("context")), KINDS[handle["api"]], handle["namespace"], handle["name"])
        what = f"{handle['namespace']}/{handle['name']} and its pods" if handle else "nothing (never submitted)"
        store.end_job(job.id, JobState.CANCELLED, f"cancelled by `multiworker cancel`; deleted {what}",
                      replica_state=ReplicaState.STOPPED)
        return store.get_job(job.id)

    def reconcile(self, store: Store, job: JobRecord) -> JobRecord:
        """A job whose driver is gone: read the object's state once (no logs), so status stays truthful."""
        from multiworker.backends.kubernetes.api import KINDS, connect
        from multiworker.backends.kubernetes.mirror import object_state

        handle = job.handle or None
        if handle is None or job.is_terminal or driver_alive(job):
            return job
        try:
            cluster = connect(handle.get("context"))
            kind = KINDS[handle["api"]]
            obj = cluster.custom.get_namespaced_custom_object(kind.group, kind.version, handle["namespace"],
                                                              kind.plural, handle["name"])
        except Exception as exc:  # noqa: BLE001 - a reader never fails on a cluster it cannot reach
            log.info("reconcile %s: %s", job.id, exc)
            return job
        state, message, restarts = object_state(kind, obj)
        if state is not None and state.is_terminal:
            store.update_job(job.id, state=state, message=message, finished_at=time.time(),
                             restarts=max(restarts, job.restarts))
            store.add_event(job.id, state.value, f"{message} (read after the driver was gone)")
        return store.get_job(job.id)
