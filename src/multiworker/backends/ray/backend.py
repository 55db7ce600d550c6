"""``RayBackend``: the group controller in this process (the Ray driver) over a :class:`RayGroup`
whose replicas run on the cluster's nodes; cancel and Lost detection from any other process."""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

from multiworker.backends.base import Backend, JobState
from multiworker.backends.controller import GroupController
from multiworker.backends.driver import driver_alive, driver_gone, stop_driver
from multiworker.backends.ray.cluster import ray_module
from multiworker.backends.ray.group import RayGroup
from multiworker.errors import UserError
from multiworker.spec.model import JobSpec
from multiworker.store import Store

__all__ = ["RayBackend"]

log = logging.getLogger(__name__)

_ADDRESS = re.compile(r"(auto|local|ray://\S+|\[?[\w.:-]+\]?:\d{1,5})")
# Replicas die with their actors (PR_SET_PDEATHSIG), actors with the driver that owns them.
_DIES_WITH_DRIVER = "Ray ended the driver's actors, and every replica with its actor"


def _address(options: dict[str, Any]) -> str | None:
    return options.get("ray_address") or os.environ.get("RAY_ADDRESS") or None


class RayBackend(Backend):
    """Replicas as processes on the nodes of a Ray cluster, supervised by the process that runs the job."""

    name = "ray"
    extra = "ray"

    def check(self, loaded, options: dict[str, Any]) -> list[str]:
        ray_module()
        address = _address(options)
        if address and not _ADDRESS.fullmatch(address):
            flag = "--ray-address" if options.get("ray_address") else "RAY_ADDRESS"
            raise UserError(f"{flag}: {address!r} is not a Ray address; give HOST:PORT of the head node "
                            f"(as printed by `ray start --head`), e.g. 10.0.0.1:6379")
        placement = loaded.spec.placement or "spread"
        where = address or "the local Ray cluster (RAY_ADDRESS unset; one is started if none runs)"
        return [f"Ray backend: {where}, placement {placement}; output_dir must be visible on every node "
                f"that gets a replica (checked before any replica starts)"]

    def run(self, store: Store, job_id: str, observer: Any = None) -> JobState:
        job = store.get_job(job_id)
        options = json.loads(job["options_json"] or "{}").get("backend_options", {})
        address = _address(options)
        store.update_job(job_id, handle_json=json.dumps({"ray_address": address}))
        group = RayGroup(JobSpec.model_validate_json(job["spec_json"]), job_id, base_dir=Path(job["base_dir"] or "."),
                         output_dir=job["output_dir"], address=address)
        try:
            return GroupController(store, job_id, group, observer).run()
        finally:
            ray = ray_module()
            if ray.is_initialized():
                ray.shutdown()

    def cancel(self, store: Store, job: dict, *, timeout: float | None = None) -> dict:
        """SIGTERM the driver, which stops every replica on every node and records Cancelled; a
        driver that is gone or does not answer in time leaves nothing behind either (its actors
        die with it), so the job is recorded Cancelled here."""
        if JobState(job["state"]).is_terminal:
            return job
        if job["supervisor_pid"] and driver_alive(job):
            job = stop_driver(store, job, timeout)
        if not JobState(job["state"]).is_terminal:
            store.end_job(job["id"], JobState.CANCELLED, f"cancelled by `multiworker cancel`; the driver was "
                          f"gone: {_DIES_WITH_DRIVER}", replica_state="Stopped")
        return store.get_job(job["id"])

    def reconcile(self, store: Store, job: dict) -> dict:
        """A job whose driver is gone is recorded Lost."""
        if JobState(job["state"]).is_terminal or (why := driver_gone(job)) is None:
            return job
        job = store.get_job(job["id"])  # it may have finished between the first read and the pid check
        if not JobState(job["state"]).is_terminal:
            store.end_job(job["id"], JobState.LOST, f"{why}; {_DIES_WITH_DRIVER}", replica_state="Lost")
        return store.get_job(job["id"])
