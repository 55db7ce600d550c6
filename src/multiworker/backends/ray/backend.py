"""``RayBackend``: the group controller in this process (the Ray driver) over a :class:`RayGroup`
whose replicas run on the cluster's nodes; cancel and Lost detection from any other process."""

from __future__ import annotations

import logging
import os
import re
from typing import Literal

from pydantic import Field

from multiworker.backends.base import Backend, BackendOptions
from multiworker.backends.controller import GroupController
from multiworker.backends.driver import driver_alive, driver_gone, stop_driver
from multiworker.backends.ray.cluster import ray_module
from multiworker.backends.ray.group import RayGroup
from multiworker.errors import UserError
from multiworker.job import JobRecord, JobState, Journal, ReplicaState, Store

__all__ = ["RayBackend"]

log = logging.getLogger(__name__)

_ADDRESS = re.compile(r"(auto|local|ray://\S+|\[?[\w.:-]+\]?:\d{1,5})")
# Replicas die with their actors (PR_SET_PDEATHSIG), actors with the driver that owns them.
_DIES_WITH_DRIVER = "Ray ended the driver's actors, and every replica with its actor"


class RayOptions(BackendOptions):
    ray_address: str | None = Field(None, description="the cluster's head, HOST:PORT (default: RAY_ADDRESS, as in Ray)")
    placement: Literal["spread", "strict_spread", "pack"] | None = Field(
        None, description="how replicas spread over the nodes: spread (default), strict_spread (one replica per "
        "node), pack (as few nodes as fit); overrides the spec's placement")


def _address(options: RayOptions) -> str | None:
    return options.ray_address or os.environ.get("RAY_ADDRESS") or None


class RayBackend(Backend):
    """Replicas as processes on the nodes of a Ray cluster, supervised by the process that runs the job."""

    name = "ray"
    extra = "ray"
    Options = RayOptions

    def check(self, loaded, options: RayOptions) -> list[str]:
        ray_module()
        address = _address(options)
        if address and not _ADDRESS.fullmatch(address):
            flag = "--ray-address" if options.ray_address else "RAY_ADDRESS"
            raise UserError(f"{flag}: {address!r} is not a Ray address; give HOST:PORT of the head node "
                            f"(as printed by `ray start --head`), e.g. 10.0.0.1:6379")
        placement = _placement(loaded.spec, options)
        where = address or "the local Ray cluster (RAY_ADDRESS unset; one is started if none runs)"
        return [f"Ray backend: {where}, placement {placement}; output_dir must be visible on every node "
                f"that gets a replica (checked before any replica starts)"]

    def drive(self, record: JobRecord, options: RayOptions, journal: Journal) -> JobState:
        address = _address(options)
        journal.set_handle({"ray_address": address})
        group = RayGroup(record.spec, record.id, base_dir=record.base_dir, output_dir=record.output_dir,
                         address=address, placement=_placement(record.spec, options),
                         stopping=lambda: journal.stop_signal is not None)
        try:
            return GroupController(record, group, journal).run()
        finally:
            ray = ray_module()
            if ray.is_initialized():
                ray.shutdown()

    def cancel(self, store: Store, job: JobRecord, *, timeout: float | None = None) -> JobRecord:
        """SIGTERM the driver, which stops every replica on every node and records Cancelled; a
        driver that is gone or does not answer in time leaves nothing behind either (its actors
        die with it), so the job is recorded Cancelled here."""
        if job.is_terminal:
            return job
        if job.supervisor_pid and driver_alive(job):
            job = stop_driver(store, job, timeout)
        if not job.is_terminal:
            store.end_job(job.id, JobState.CANCELLED, f"cancelled by `multiworker cancel`; the driver was "
                          f"gone: {_DIES_WITH_DRIVER}", replica_state=ReplicaState.STOPPED)
        return store.get_job(job.id)

    def reconcile(self, store: Store, job: JobRecord) -> JobRecord:
        """A job whose driver is gone is recorded Lost."""
        if job.is_terminal or (why := driver_gone(job)) is None:
            return job
        job = store.get_job(job.id)  # it may have finished between the first read and the pid check
        if not job.is_terminal:
            store.end_job(job.id, JobState.LOST, f"{why}; {_DIES_WITH_DRIVER}", replica_state=ReplicaState.LOST)
        return store.get_job(job.id)


def _placement(spec, options: RayOptions) -> str:
    """``--placement`` / ``--backend-opt placement=``, else the spec's (older specs carry it), else spread."""
    return options.placement or spec.placement or "spread"
