"""``LocalBackend``: the group controller over a :class:`LocalGroup` in this process (its replicas
in a private network namespace where permitted, else a loud warning), a watchdog that kills what a
SIGKILLed driver leaves, and cancel / Lost detection from any other process."""

from __future__ import annotations

import logging
import signal
import time

from multiworker import procs
from multiworker.backends.base import Backend, BackendOptions
from multiworker.backends.controller import GroupController
from multiworker.backends.driver import driver_alive, driver_gone, stop_driver
from multiworker.backends.local.group import LocalGroup
from multiworker.backends.local.watchdog import start_watchdog
from multiworker.job import JobRecord, JobState, Journal, ReplicaState, Store
from multiworker.netns import NETNS_ENV, open_job_network, remove_job_network
from multiworker.ports import PortReservations
from multiworker.storage.standin import StandIn, StandInFailed, missing_requirements, tensorflow_gcs_note

__all__ = ["LocalBackend"]

log = logging.getLogger(__name__)


_EXPOSED = ("replicas listen on every network interface without authentication (TensorFlow's gRPC "
            "servers): any host that reaches this machine can run ops in them while the job runs")
_warned_exposed = False


def _stop_strays(job_id: str, settle: float = 3.0) -> int:
    """Stop every process still carrying the job's id (after ``settle`` seconds to exit by themselves)."""
    deadline = time.monotonic() + settle
    while (found := procs.job_processes(job_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid, ticks in found.items():
        procs.signal_group(pid, signal.SIGTERM, ticks)
    deadline = time.monotonic() + 3.0
    while found and time.monotonic() < deadline:
        found = {p: t for p, t in found.items() if procs.start_ticks(p) == t and procs.pid_alive(p)}
        time.sleep(0.1)
    for pid, ticks in found.items():
        procs.signal_group(pid, signal.SIGKILL, ticks)
    return len(found)


def _network_event(journal: Journal, isolated: str | None, why: str) -> None:
    """Say where the replicas' ports can be reached from: an event, and a console note via the observer."""
    global _warned_exposed
    if isolated:
        reason, warning = "NetworkIsolated", False
        message = (f"replicas run in network namespace {isolated}: loopback only, unreachable from other hosts "
                   f"(and without network access; {NETNS_ENV}=0 opts out)")
    else:
        reason, warning = "Exposed", True
        fix = (f"unset {NETNS_ENV}" if NETNS_ENV in why
               else "run as root with iproute2, or allow unprivileged user namespaces,")
        message = f"{_EXPOSED} ({why}); {fix} for a private network namespace per job"
        if not journal.observed and not _warned_exposed:  # with an observer, the event is the console note
            _warned_exposed = True
            log.warning("job %s: %s", journal.job_id, message)
    journal.event(reason, message, warning=warning)


def _start_standin(record: JobRecord, journal: Journal, enter) -> StandIn | None:
    """The job's Cloud Storage stand-in for its ``--map-path gs://`` mappings (None without any), so
    that paths a trainer builds at run time reach the mapped directories too."""
    mounts = [m for m in record.run.map_paths if m.startswith("gs://")]
    if not mounts:
        return None
    missing = missing_requirements()
    if missing:
        journal.event("StorageStandIn", f"gs:// paths built at run time are not mapped: the storage stand-in needs "
                      f"{', '.join(missing)} (pip install 'multiworker[storage]')", warning=True)
        return None
    note = tensorflow_gcs_note()
    if note:
        journal.event("StorageStandIn", note, warning=True)
    standin = StandIn(mounts, record.job_dir / "storage", job_id=record.id, enter=enter)
    try:
        standin.start()
    except (StandInFailed, OSError) as exc:
        journal.event("StorageStandIn", f"gs:// paths built at run time are not mapped: {exc}", warning=True)
        return None
    served = ", ".join(m.replace("=", " -> ", 1) for m in mounts)
    journal.event("StorageStandIn", f"{served} (any gs:// path the replicas use, through a local Cloud Storage "
                  f"stand-in at {standin.env()['STORAGE_EMULATOR_HOST']})")
    return standin


class LocalBackend(Backend):
    """Replicas as processes on this machine, supervised by the process that runs the job."""

    name = "local"

    def drive(self, record: JobRecord, options: BackendOptions, journal: Journal) -> JobState:
        watchdog = start_watchdog(record.id)
        network, why = open_job_network(record.id)
        ports = None if network is not None else PortReservations(journal.store.home)
        standin = None
        try:
            _network_event(journal, network.name if network else None, why)
            standin = _start_standin(record, journal, network.enter if network is not None else None)
            group = LocalGroup(network=network, ports=ports, base_env=standin.env() if standin else None)
            try:
                return GroupController(record, group, journal).run()
            finally:
                group.shutdown()
        finally:
            if standin is not None:
                standin.stop()
            if network is not None:
                network.close()
            if ports is not None:
                ports.release()
            watchdog.kill()
            watchdog.wait()

    def cancel(self, store: Store, job: JobRecord, *, timeout: float | None = None) -> JobRecord:
        """SIGTERM the driver (it stops every replica itself: grace period, then SIGKILL); if it is
        gone or does not answer in time, stray replicas are killed here and the job is recorded
        Cancelled. A job that has already ended is returned unchanged."""
        job_id = job.id
        if job.is_terminal:
            return job
        if job.supervisor_pid and driver_alive(job):
            job = stop_driver(store, job, timeout)  # a SIGKILLed driver's replicas die with it (PDEATHSIG)
        if not job.is_terminal:
            killed = _stop_strays(job_id, settle=0.0)
            message = "cancelled by `multiworker cancel`; the supervisor was gone"
            if killed:
                message += f"; killed {killed} leftover replica process(es)"
            store.end_job(job_id, JobState.CANCELLED, message, replica_state=ReplicaState.STOPPED)
        leftover = _stop_strays(job_id)
        if leftover:
            log.warning("job %s: killed %d process(es) left after the supervisor ended", job_id, leftover)
        remove_job_network(job_id)
        return store.get_job(job_id)

    def reconcile(self, store: Store, job: JobRecord) -> JobRecord:
        """A job whose driver is gone is recorded Lost, and any stray replica is killed."""
        job_id = job.id
        if job.is_terminal:
            return job
        why = driver_gone(job)
        if why is None:
            return job
        job = store.get_job(job_id)  # it may have finished between the first read and the pid check
        if job.is_terminal:
            return job
        strays = procs.job_processes(job_id)
        killed = sum(procs.signal_group(pid, signal.SIGKILL, ticks) for pid, ticks in strays.items())
        if killed:
            why += f"; killed {killed} leftover replica process(es)"
        remove_job_network(job_id)
        log.info("job %s: %s", job_id, why)
        store.end_job(job_id, JobState.LOST, why, replica_state=ReplicaState.LOST)
        return store.get_job(job_id)
