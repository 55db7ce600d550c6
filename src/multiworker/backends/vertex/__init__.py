"""The Vertex AI backend: a job becomes a CustomJob (container pools, or Python-module pools packaged
as sdists in the staging bucket), Vertex AI runs and restarts it, and this backend mirrors its state
and Cloud Logging output into the store and the per-replica logs.

Options (``backend_options``): project, region, staging_bucket (gs://B), image (a container for every
pool), executor_image (overrides the prebuilt TensorFlow image of Python-module pools), allow_loss
(settings Vertex AI cannot express become notes instead of errors).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from multiworker.backends.base import Backend, JobState, LogLayout
from multiworker.backends.vertex.body import Plan, console_url, plan_job, set_packages
from multiworker.errors import MultiworkerError, UserError

__all__ = ["VertexBackend"]

log = logging.getLogger(__name__)

DEFAULT_REGION = "us-central1"


def _poll_seconds() -> float:
    return float(os.environ.get("MULTIWORKER_VERTEX_POLL_SECONDS") or 15)


def _options(raw: dict[str, Any]) -> dict[str, Any]:
    """The backend's options with defaults: project from the options or the environment's gcloud config."""
    opts = {k: raw.get(k) for k in ("project", "region", "staging_bucket", "image", "executor_image", "allow_loss")}
    opts["region"] = opts["region"] or DEFAULT_REGION
    opts["project"] = opts["project"] or os.environ.get("GOOGLE_CLOUD_PROJECT") or os.environ.get("CLOUDSDK_CORE_PROJECT")
    if not opts["project"]:
        raise UserError("--project: no Google Cloud project given; pass --project PROJECT_ID "
                        "(or set GOOGLE_CLOUD_PROJECT)")
    if opts["staging_bucket"] and not str(opts["staging_bucket"]).startswith("gs://"):
        raise UserError(f"--staging-bucket: {opts['staging_bucket']!r} is not a bucket; write it like gs://BUCKET")
    return opts


def _job_options(job: dict) -> tuple[dict, list[str]]:
    options = json.loads(job.get("options_json") or "{}")
    return _options(options.get("backend_options") or options), list(options.get("trainer_args") or [])


class VertexBackend(Backend):
    """Vertex AI custom training; the platform restarts, this backend submits and mirrors."""

    name = "vertex"
    extra = "vertex"
    supervised_here = False

    def _plan(self, spec, opts: dict, *, job_id: str, trainer_args=(), source: str = "<spec>",
              checked: bool = False) -> Plan:
        """The CustomJob plan. ``checked``: ``check`` already refused what Vertex AI cannot express (a
        spec read back from the store no longer tells defaults from written fields), so only note it."""
        plan = plan_job(spec, job_id=job_id, region=opts["region"], image=opts["image"],
                        executor=opts["executor_image"], staging_bucket=opts["staging_bucket"],
                        trainer_args=trainer_args, source=source, allow_loss=checked or bool(opts["allow_loss"]))
        if checked:  # what check() refused or noted about written fields, it said then
            plan.notes[:] = [n for n in plan.notes if not n.startswith("--allow-loss: ")]
        if plan.package_pools and not opts["staging_bucket"]:
            raise UserError("--staging-bucket: a Python-module job is uploaded as an sdist; pass --staging-bucket "
                            "gs://BUCKET, or --image IMAGE to run a container that holds the trainer")
        return plan

    def check(self, loaded, options: dict[str, Any]) -> list[str]:
        return self._plan(loaded.spec, _options(options), job_id="check", source=loaded.source).notes

    # -- run ------------------------------------------------------------------------------------
    def run(self, store, job_id: str, observer: Any = None) -> JobState:
        from multiworker.spec.model import JobSpec

        job = store.get_job(job_id)
        if job["state"] != JobState.PENDING.value:  # e.g. cancelled before it was submitted
            return JobState(job["state"])
        store.update_job(job_id, supervisor_pid=os.getpid(), heartbeat_at=time.time())
        try:
            opts, trainer_args = _job_options(job)
            spec = JobSpec.model_validate_json(job["spec_json"])
            plan = self._plan(spec, opts, job_id=job_id, trainer_args=trainer_args, source=job.get("spec_path") or "<spec>",
                              checked=True)
            from multiworker.backends.vertex.gcp import Cloud

            cloud = Cloud(opts["project"], opts["region"])
            remote = self._submit(store, job, cloud, plan, opts, observer)
        except MultiworkerError as exc:
            store.update_job(job_id, state=JobState.FAILED.value, finished_at=time.time(), message=str(exc))
            store.add_event(job_id, "SubmitFailed", str(exc), warning=True)
            raise
        if remote is None:
            return JobState(store.get_job(job_id)["state"])
        return self._follow(store, job_id, cloud, remote, observer)

    def _submit(self, store, job: dict, cloud, plan: Plan, opts: dict, observer) -> dict | None:
        job_id = job["id"]
        uploaded: list[str] = []
        if plan.package_pools:
            uploaded = self._upload(job, cloud, plan, opts)
        for note in plan.notes:
            store.add_event(job_id, "Note", note)
        body = set_packages(plan, uploaded) if uploaded else plan.body
        (LogLayout(Path(job["job_dir"])).job_dir / "customjob.json").write_text(json.dumps(body, indent=2))
        if store.get_job(job_id)["state"] != JobState.PENDING.value:  # cancelled while packaging
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
        store.update_job(job_id, handle_json=json.dumps(handle), **({"output_dir": output} if output else {}))
        store.start_attempt(job_id, 0)
        layout = LogLayout(Path(job["job_dir"]))
        for replica in plan.tasks.values():
            role, _, index = replica.rpartition("-")
            store.upsert_replica(job_id, role, int(index), state=JobState.PENDING.value, attempt=0,
                                 log_path=str(layout.replica_log(0, replica)), host="vertex", node=None)
        message = f"CustomJob {name}; console: {handle['console_url']}"
        store.add_event(job_id, "Submitted", message)
        log.info("submitted %s", message)
        if observer is not None:
            observer.on_event("Submitted", message, replica=None, warning=False)
        return remote

    def _upload(self, job: dict, cloud, plan: Plan, opts: dict) -> list[str]:
        from multiworker.backends.vertex import package
        from multiworker.backends.vertex.gcp import split_gs
        from multiworker.spec.model import JobSpec

        spec = JobSpec.model_validate_json(job["spec_json"])
        bucket, prefix = split_gs(opts["staging_bucket"], "--staging-bucket")
        cloud.check_bucket(bucket)
        role = next(r for r in spec.replica_counts() if spec.resolved(r).module and not spec.resolved(r).image)
        program = spec.resolved(role)
        source = Path(job["base_dir"] or ".") / (program.working_dir or ".")
        uploaded: list[str] = []
        with tempfile.TemporaryDirectory(prefix="mw-vertex-") as tmp:
            sdist, generated = package.trainer_sdist(source.resolve(), Path(tmp), name=spec.name, module=program.module)
            sdists = [sdist]
            if package.imports_multiworker(source):
                sdists.append(package.runtime_sdist(Path(tmp), tf_minor=plan.tf_minor))
            try:
                for path in sdists:
                    name = "/".join(p for p in (prefix, "multiworker", job["id"], "packages", path.name) if p)
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

    def _follow(self, store, job_id: str, cloud, remote: dict, observer) -> JobState:
        from multiworker.backends.vertex.logs import LogReader
        from multiworker.backends.vertex.mirror import finish, job_state, mirror

        job = store.get_job(job_id)
        handle = json.loads(job["handle_json"])
        reader = LogReader(cloud, LogLayout(Path(job["job_dir"])), job_number=handle["job_number"], tasks=handle["tasks"])
        replicas = list(handle["tasks"].values())
        previous = _stop_on_signals()
        try:
            while True:
                self._read_logs(reader, observer)
                state = mirror(store, job_id, remote, replicas, reader.active)
                if state.is_terminal:
                    break
                _beat_sleep(store, job_id, _poll_seconds())
                remote = cloud.get_job(handle["resource_name"])
        except KeyboardInterrupt:
            store.add_event(job_id, "Interrupted", "stopping: cancelling the CustomJob", warning=True)
            remote = self._cancel_remote(cloud, handle["resource_name"])
            state = job_state(remote) if job_state(remote).is_terminal else JobState.CANCELLED
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        self._read_logs(reader, observer)
        mirror(store, job_id, remote, replicas, reader.active)
        message = finish(store, job_id, remote, state)
        if observer is not None:
            observer.on_finish(state.value, message)
        return state

    @staticmethod
    def _read_logs(reader, observer) -> None:
        from multiworker.errors import BackendError

        try:
            lines = reader.poll()
        except (BackendError, UserError) as exc:
            log.warning("Cloud Logging: %s", exc)
            return
        if observer is not None:
            for replica, rows in lines.items():
                for line in rows:
                    observer.on_line(replica, line)

    @staticmethod
    def _cancel_remote(cloud, name: str, wait: float = 60.0) -> dict:
        """cancelCustomJob, then wait (bounded) for a final state; the last CustomJob read."""
        from multiworker.backends.vertex.mirror import job_state

        cloud.cancel_job(name)
        deadline = time.monotonic() + wait
        remote = cloud.get_job(name)
        while not job_state(remote).is_terminal and time.monotonic() < deadline:
            time.sleep(min(_poll_seconds(), 2.0))
            remote = cloud.get_job(name)
        return remote

    # -- from other processes --------------------------------------------------------------------
    def cancel(self, store, job: dict, *, timeout: float | None = None) -> dict:
        from multiworker.backends.vertex.gcp import Cloud
        from multiworker.backends.vertex.mirror import finish, job_state

        if JobState(job["state"]).is_terminal:
            return job
        handle = json.loads(job.get("handle_json") or "{}")
        if not handle.get("resource_name"):
            store.update_job(job["id"], state=JobState.CANCELLED.value, finished_at=time.time(),
                             message="cancelled before it was submitted")
            store.add_event(job["id"], "Cancelled", "cancelled before it was submitted")
            return store.get_job(job["id"])
        cloud = Cloud(handle["project"], handle["region"])
        remote = self._cancel_remote(cloud, handle["resource_name"], wait=30.0 if timeout is None else timeout)
        state = job_state(remote)
        current = store.get_job(job["id"])
        if not JobState(current["state"]).is_terminal:  # the driver, if alive, may have finished it already
            finish(store, job["id"], remote, state if state.is_terminal else JobState.CANCELLED)
        return store.get_job(job["id"])

    def reconcile(self, store, job: dict) -> dict:
        """With its driver gone, a job still runs on Vertex AI: read its state once and record it."""
        from multiworker.backends.vertex.gcp import Cloud
        from multiworker.backends.vertex.mirror import finish, mirror

        handle = json.loads(job.get("handle_json") or "{}")
        from multiworker.backends.driver import driver_alive

        if JobState(job["state"]).is_terminal or not handle.get("resource_name") or driver_alive(job):
            return job
        try:
            cloud = Cloud(handle["project"], handle["region"])
            remote = cloud.get_job(handle["resource_name"])
        except MultiworkerError as exc:
            log.debug("reconcile %s: %s", job["id"], exc)
            return job
        state = mirror(store, job["id"], remote, list(handle["tasks"].values()), set())
        if state.is_terminal:
            finish(store, job["id"], remote, state)
        return store.get_job(job["id"])



def _beat_sleep(store, job_id: str, seconds: float) -> None:
    """Sleep between polls, recording the driver's heartbeat about once a second."""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        store.update_job(job_id, heartbeat_at=time.time())
        time.sleep(min(1.0, left))


def _stop_on_signals() -> dict:
    """SIGTERM and SIGHUP stop the job as Ctrl-C does (the CustomJob is cancelled); main thread only."""
    def handler(signum, _frame):
        raise KeyboardInterrupt(signum)

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread
            pass
    return previous
