"""``ContainersBackend``: the group controller over a :class:`ContainerGroup` in this process, as
the local backend runs processes; the images are checked (pulled where allowed) before the job is
recorded; a watchdog removes the job's containers and network if the driver is killed; cancel and
Lost detection from any other process remove them too."""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import Field

from multiworker.backends.base import Backend, BackendOptions
from multiworker.backends.containers.group import ContainerGroup
from multiworker.backends.containers.watchdog import start_watchdog
from multiworker.backends.controller import GroupController
from multiworker.backends.driver import driver_alive, driver_gone, stop_driver
from multiworker.containers.engine import RUNTIMES, Engine, find_engine
from multiworker.containers.images import default_tag
from multiworker.errors import UserError
from multiworker.job import JobRecord, JobState, Journal, ReplicaState, Store

__all__ = ["ContainersBackend", "ContainersOptions", "pool_images"]

log = logging.getLogger(__name__)


class ContainersOptions(BackendOptions):
    image: str | None = Field(None, description="the image of the pools that name none (default: the spec's "
                              "`image`, else <job name>:latest as `multiworker build` tags it)")
    pull: Literal["missing", "never", "always"] = Field(
        "missing", description="pull an image that is not in the local store (missing), never, or always")
    engine: Literal["podman", "docker"] | None = Field(
        None, description="the container engine (default: podman or docker, whichever works here)")
    mounts: str | None = Field(None, description="host directories (comma-separated) bind-mounted at the same "
                               "path; --map-path directories are added")


def pool_images(spec, image: str | None) -> dict[str, str]:
    """role -> the image its containers run: the pool's own, the job's, ``image``, or ``<name>:latest``."""
    return {role: spec.resolved(role).image or image or default_tag(spec.name, None)
            for role in spec.replica_counts()}


def _mounts(record: JobRecord, options: ContainersOptions) -> list[str]:
    """Directories bind-mounted at the same path: the job's output dir and --mounts (with --map-path's)."""
    out = [str(record.output_dir)]
    for item in (options.mounts or "").split(","):
        if item.strip() and item.strip() not in out:
            out.append(item.strip())
    return out


class ContainersBackend(Backend):
    """Replicas as containers on this machine, supervised by the process that runs the job."""

    name = "containers"
    Options = ContainersOptions

    def _engine(self, options: ContainersOptions) -> Engine:
        return find_engine(RUNTIMES, purpose="run containers", name=options.engine)

    def check(self, loaded, options: ContainersOptions) -> list[str]:
        """Every pool's image is in the local store, or pulled now (unless --pull never)."""
        engine = self._engine(options)
        notes = [f"replicas run as {engine.name} containers"]
        for image in dict.fromkeys(pool_images(loaded.spec, options.image).values()):
            present = engine.has_image(image)
            if options.pull == "always" or (not present and options.pull == "missing"):
                why = engine.pull(image)
                if why is None:
                    continue
                if present:
                    notes.append(f"could not pull {image} ({why}); using the local one")
                    continue
                raise UserError(f"image {image}: not in {engine.name}'s local store and cannot be pulled ({why}); "
                                f"build it with `multiworker build {loaded.source} -t {image}` or `docker build "
                                f"-t {image} .`")
            if not present:
                raise UserError(f"image {image}: not in {engine.name}'s local store (--pull never); build it with "
                                f"`multiworker build {loaded.source} -t {image}` or `docker build -t {image} .`")
        return notes

    def drive(self, record: JobRecord, options: ContainersOptions, journal: Journal) -> JobState:
        engine = self._engine(options)
        watchdog = start_watchdog(record.id, engine)
        group = ContainerGroup(record, engine, pool_images(record.spec, options.image), _mounts(record, options))
        try:
            group.open_network()
            journal.event("NetworkIsolated", f"replicas run as {engine.name} containers on network {group.network} "
                          "(internal: no route out of it)")
            return GroupController(record, group, journal).run()
        finally:
            group.shutdown()
            watchdog.kill()
            watchdog.wait()

    def cancel(self, store: Store, job: JobRecord, *, timeout: float | None = None) -> JobRecord:
        """SIGTERM the driver (it stops every container itself); if it is gone or does not answer,
        the job's containers are removed here and the job is recorded Cancelled."""
        if job.is_terminal:
            return job
        if job.supervisor_pid and driver_alive(job):
            job = stop_driver(store, job, timeout)
        removed = self._remove(job)
        if not job.is_terminal:
            message = "cancelled by `multiworker cancel`; the supervisor was gone"
            if removed:
                message += f"; removed {removed} leftover container(s)"
            store.end_job(job.id, JobState.CANCELLED, message, replica_state=ReplicaState.STOPPED)
        return store.get_job(job.id)

    def reconcile(self, store: Store, job: JobRecord) -> JobRecord:
        """A job whose driver is gone is recorded Lost, and its containers are removed."""
        if job.is_terminal:
            return job
        why = driver_gone(job)
        if why is None:
            return job
        job = store.get_job(job.id)
        if job.is_terminal:
            return job
        removed = self._remove(job)
        if removed:
            why += f"; removed {removed} leftover container(s)"
        store.end_job(job.id, JobState.LOST, why, replica_state=ReplicaState.LOST)
        return store.get_job(job.id)

    def _remove(self, job: JobRecord) -> int:
        try:
            engine = self._engine(self.options(job.backend_options))
        except UserError as exc:
            log.warning("job %s: cannot remove its containers: %s", job.id, exc)
            return 0
        return engine.remove_job(job.id)
