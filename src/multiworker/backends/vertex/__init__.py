"""The Vertex AI backend: a job becomes a CustomJob (container pools, or Python-module pools packaged
as sdists in the staging bucket), Vertex AI runs and restarts it, and this backend mirrors its state
and Cloud Logging output into the store and the per-replica logs.

Options: :class:`VertexOptions`.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from pathlib import Path

from pydantic import Field

from multiworker.backends.base import Backend, BackendOptions
from multiworker.backends.driver import driver_alive
from multiworker.backends.vertex.body import Plan, console_url, plan_job, set_packages
from multiworker.backends.vertex.mirror import finish, job_state, mirror
from multiworker.cluster import ReplicaId
from multiworker.errors import BackendError, MultiworkerError, UserError
from multiworker.job import JobRecord, JobState, Journal, ReplicaState, Store

__all__ = ["VertexBackend", "VertexOptions"]

log = logging.getLogger(__name__)

DEFAULT_REGION = "us-central1"


def _poll_seconds() -> float:
    return float(os.environ.get("MULTIWORKER_VERTEX_POLL_SECONDS") or 15)


class VertexOptions(BackendOptions):
    project: str | None = Field(None, description="Google Cloud project id (default: GOOGLE_CLOUD_PROJECT)")
    region: str = Field(DEFAULT_REGION, description="region")
    staging_bucket: str | None = Field(None, description="gs://BUCKET for packages and output")
    image: str | None = Field(None, description="the container image every pool runs")
    executor_image: str | None = Field(
        None, description="image that runs Python-module pools (default: prebuilt TensorFlow)")
    allow_loss: bool = Field(False, description="note, instead of refusing, settings Vertex AI cannot hold")

    def resolved(self) -> VertexOptions:
        """With the project from the environment's gcloud config; a one-line error when none is known."""
        project = self.project or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
        if not project:
            raise UserError("--project: no Google Cloud project given; pass --project PROJECT_ID "
                            "(or set GOOGLE_CLOUD_PROJECT)")
        if self.staging_bucket and not self.staging_bucket.startswith("gs://"):
            raise UserError(f"--staging-bucket: {self.staging_bucket!r} is not a bucket; write it like gs://BUCKET")
        return self.model_copy(update={"project": project})


class VertexBackend(Backend):
    """Vertex AI custom training; the platform restarts, this backend submits and mirrors."""

    name = "vertex"
    extra = "vertex"
    supervised_here = False
    Options = VertexOptions

    def _plan(self, spec, opts: VertexOptions, *, job_id: str, trainer_args=(), source: str = "<spec>",
              checked: bool = False) -> Plan:
        """The CustomJob plan. ``checked``: ``check`` already refused what Vertex AI cannot express (a
        spec read back from the store no longer tells defaults from written fields), so only note it."""
        plan = plan_job(spec, job_id=job_id, region=opts.region, image=opts.image,
                        executor=opts.executor_image, staging_bucket=opts.staging_bucket,
                        trainer_args=trainer_args, source=source, allow_loss=checked or opts.allow_loss)
        if checked:  # what check() refused or noted about written fields, it said then
            plan.notes[:] = [n for n in plan.notes if not n.startswith("--allow-loss: ")]
        if plan.package_pools and not opts.staging_bucket:
            raise UserError("--staging-bucket: a Python-module job is uploaded as an sdist; pass --staging-bucket "
                            "gs://BUCKET, or --image IMAGE to run a container that holds the trainer")
        return plan

    def check(self, loaded, options: VertexOptions) -> list[str]:
        """The plan, then credentials and a reachable endpoint: refused here, before a detached run
        prints a job id."""
        opts = options.resolved()
        plan = self._plan(loaded.spec, opts, job_id="check", source=loaded.source)
        from multiworker.backends.vertex.gcp import Cloud

        Cloud(opts.project, opts.region).probe(storage=bool(plan.package_pools))
        return plan.notes

    # -- run ------------------------------------------------------------------------------------
    def drive(self, record: JobRecord, options: VertexOptions, journal: Journal) -> JobState:
        try:
            opts = options.resolved()
            plan = self._plan(record.spec, opts, job_id=record.id, trainer_args=record.run.trainer_args,
                              source=record.spec_path or "<spec>", checked=True)
            from multiworker.backends.vertex.gcp import Cloud

            cloud = Cloud(opts.project, opts.region)
            remote = self._submit(record, journal, cloud, plan, opts)
        except MultiworkerError as exc:
            journal.event("SubmitFailed", str(exc), warning=True)
            raise
        if remote is None:  # cancelled while packaging
            return journal.current().state
        journal.platform_owned = True
        return self._follow(journal, cloud, remote)

    def _submit(self, record: JobRecord, journal: Journal, cloud, plan: Plan, opts: VertexOptions) -> dict | None:
        uploaded: list[str] = []
        if plan.package_pools:
            uploaded = self._upload(record, cloud, plan, opts)
        for note in plan.notes:
            journal.event("Note", note)
        body = set_packages(plan, uploaded) if uploaded else plan.body
        (record.job_dir / "customjob.json").write_text(json.dumps(body, indent=2))
        if journal.current().state is not JobState.PENDING:  # cancelled while packaging
            self._discard(cloud, uploaded)
            return None
        try:
            remote = cloud.create_job(body)
        except MultiworkerError as exc:
            raise type(exc)(f"{exc}{self._discard(cloud, uploaded)}") from exc
        name = remote["name"]
        handle = {"resource_name": name, "project": cloud.project, "region": cloud.region,
                  "console_url": console_url(name), "job_number": name.rsplit("/", 1)[-1],
                  "packages": uploaded, "tasks": plan.tasks}
        output = (body["jobSpec"].get("baseOutputDirectory") or {}).get("outputUriPrefix")
        journal.set_handle(handle)
        if output:
            journal.set_output_dir(output)
        journal.start_attempt(0)
        for replica in plan.tasks.values():
            journal.replica(ReplicaId.parse(replica), ReplicaState.PENDING, attempt=0,
                            log_path=str(record.layout.replica_log(0, replica)), host="vertex", node=None)
        message = f"CustomJob {name}; console: {handle['console_url']}"
        journal.event("Submitted", message)
        log.info("submitted %s", message)
        return remote

    def _upload(self, job: JobRecord, cloud, plan: Plan, opts: VertexOptions) -> list[str]:
        from multiworker.backends.vertex import package
        from multiworker.backends.vertex.gcp import split_gs

        spec = job.spec
        bucket, prefix = split_gs(opts.staging_bucket, "--staging-bucket")
        cloud.check_bucket(bucket)
        role = next(r for r in spec.replica_counts() if spec.resolved(r).module and not spec.resolved(r).image)
        program = spec.resolved(role)
        source = job.base_dir / (program.working_dir or ".")
        uploaded: list[str] = []
        with tempfile.TemporaryDirectory(prefix="mw-vertex-") as tmp:
            sdist, generated = package.trainer_sdist(source.resolve(), Path(tmp), name=spec.name, module=program.module)
            sdists = [sdist]
            if package.imports_multiworker(source):
                sdists.append(package.runtime_sdist(Path(tmp), tf_minor=plan.tf_minor))
            try:
                for path in sdists:
                    name = "/".join(p for p in (prefix, "multiworker", job.id, "packages", path.name) if p)
                    uploaded.append(cloud.upload(path, bucket, name))
            except MultiworkerError as exc:
                raise type(exc)(f"{exc}{self._discard(cloud, uploaded)}") from exc
        if generated:
            plan.notes.append(f"{source} has no pyproject.toml; packaged its Python packages with a generated one")
        return uploaded

    @staticmethod
    def _discard(cloud, uploaded: list[str]) -> str:
        """Delete what was uploaded; the clause that tells the user what happened to it."""
        left = []
        for uri in uploaded:
            try:
                cloud.delete(uri)
            except MultiworkerError:
                left.append(uri)
        if left:
            return f" (left behind: {', '.join(left)}; delete with `gcloud storage rm {' '.join(left)}`)"
        return f" (deleted the uploaded {', '.join(uploaded)})" if uploaded else ""

    def _follow(self, journal: Journal, cloud, remote: dict) -> JobState:
        from multiworker.backends.vertex.logs import LogReader

        job = journal.current()
        handle = job.handle
        reader = LogReader(cloud, job.layout, job_number=handle["job_number"], tasks=handle["tasks"])
        replicas = list(handle["tasks"].values())
        while True:
            self._read_logs(reader, journal)
            state = mirror(journal, remote, replicas, reader.active)
            if state.is_terminal:
                break
            if journal.sleep(_poll_seconds()):
                journal.event("Interrupted", f"{journal.stop_name}: cancelling the CustomJob", warning=True)
                remote = self._cancel_remote(cloud, handle["resource_name"])
                state = job_state(remote) if job_state(remote).is_terminal else JobState.CANCELLED
                break
            remote = cloud.get_job(handle["resource_name"])
        self._read_logs(reader, journal)
        mirror(journal, remote, replicas, reader.active)
        return finish(journal, remote, state)

    @staticmethod
    def _read_logs(reader, journal: Journal) -> None:
        """New Cloud Logging lines into the replica logs, and through the journal: metric lines to the
        store, the rest to the console."""
        try:
            lines = reader.poll()
        except (BackendError, UserError) as exc:
            log.warning("Cloud Logging: %s", exc)
            return
        for replica, rows in lines.items():
            if rows:
                journal.feed(replica, "".join(f"{line}\n" for line in rows).encode())

    @staticmethod
    def _cancel_remote(cloud, name: str, wait: float = 60.0) -> dict:
        """cancelCustomJob, then wait (bounded) for a final state; the last CustomJob read."""
        cloud.cancel_job(name)
        deadline = time.monotonic() + wait
        remote = cloud.get_job(name)
        while not job_state(remote).is_terminal and time.monotonic() < deadline:
            time.sleep(min(_poll_seconds(), 2.0))
            remote = cloud.get_job(name)
        return remote

    # -- from other processes --------------------------------------------------------------------
    def cancel(self, store: Store, job: JobRecord, *, timeout: float | None = None) -> JobRecord:
        from multiworker.backends.vertex.gcp import Cloud

        if job.is_terminal:
            return job
        handle = job.handle
        if not handle.get("resource_name"):
            store.end_job(job.id, JobState.CANCELLED, "cancelled before it was submitted",
                          replica_state=ReplicaState.STOPPED)
            return store.get_job(job.id)
        cloud = Cloud(handle["project"], handle["region"])
        remote = self._cancel_remote(cloud, handle["resource_name"], wait=30.0 if timeout is None else timeout)
        state = job_state(remote)
        # the driver, if alive, may have finished it already: that end stands
        finish(Journal(store, job), remote, state if state.is_terminal else JobState.CANCELLED)
        return store.get_job(job.id)

    def reconcile(self, store: Store, job: JobRecord) -> JobRecord:
        """With its driver gone, a job still runs on Vertex AI: read its state once and record it."""
        from multiworker.backends.vertex.gcp import Cloud

        handle = job.handle
        if job.is_terminal or not handle.get("resource_name") or driver_alive(job):
            return job
        try:
            cloud = Cloud(handle["project"], handle["region"])
            remote = cloud.get_job(handle["resource_name"])
        except MultiworkerError as exc:
            log.debug("reconcile %s: %s", job.id, exc)
            return job
        journal = Journal(store, job)
        state = mirror(journal, remote, list(handle["tasks"].values()), set())
        if state.is_terminal:
            finish(journal, remote, state)
        return store.get_job(job.id)
