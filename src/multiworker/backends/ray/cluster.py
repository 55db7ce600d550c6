"""Talking to the Ray cluster: the lazy import, connecting without stealing the launcher's signal
handlers, and saying in one line why a job does not fit the cluster.

Connecting is bounded: the head's address must answer a TCP connection within
``MULTIWORKER_RAY_CONNECT_TIMEOUT`` seconds (default 20) and Ray must join within
``MULTIWORKER_RAY_INIT_TIMEOUT`` (default 180; Ray alone would retry for many minutes); either
failure is one line naming the address tried. A stop signal meanwhile ends the wait at once."""

from __future__ import annotations

import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multiworker.errors import StartFailed, UserError

__all__ = ["ray_module", "connect", "fit_problem", "strategy_of", "is_url", "lost_actor_errors",
           "RESOURCES_PER_REPLICA", "PLACEMENTS"]

log = logging.getLogger(__name__)

#: what each replica's bundle reserves on its node
RESOURCES_PER_REPLICA = {"CPU": 1.0}
#: multiworker's name -> Ray's placement group strategy
PLACEMENTS = {"spread": "SPREAD", "strict_spread": "STRICT_SPREAD", "pack": "PACK"}


def ray_module():
    """``import ray``, or a one-line error naming the extra that brings it."""
    try:
        import ray
    except ModuleNotFoundError as exc:
        raise UserError("--backend ray: needs the 'ray' package; pip install 'multiworker[ray]'") from exc
    return ray


def strategy_of(placement: str) -> str:
    try:
        return PLACEMENTS[placement]
    except KeyError:
        raise UserError(f"placement: {placement!r} is not a placement; choose one of {', '.join(PLACEMENTS)}") from None


def is_url(path: str) -> bool:
    """gs://, s3://, hdfs://...: storage every node reaches by itself."""
    return "://" in path


_shipped: dict[str, Path] = {}
_STEP = 0.2


def _seconds(name: str, default: float) -> float:
    try:
        return max(1.0, float(os.environ.get(name, default)))
    except ValueError:
        return default


def _tried(address: str) -> str:
    """The address Ray itself dials for ``address`` (it replaces a loopback host by the node's IP)."""
    try:
        from ray._private.services import canonicalize_bootstrap_address

        return canonicalize_bootstrap_address(address) or address
    except Exception:  # noqa: BLE001 - Ray's private helper moved: the address as given
        return address


def _named(address: str, tried: str) -> str:
    return address if tried == address else f"{address} (tried as {tried})"


def _probe(address: str, stopping: Callable[[], bool]) -> None:
    """Wait (bounded) until something accepts TCP connections at the head's address."""
    tried = _tried(address)
    host, _, port = tried.rpartition(":")
    timeout = _seconds("MULTIWORKER_RAY_CONNECT_TIMEOUT", 20.0)
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=min(5.0, timeout)).close()
            return
        except (OSError, ValueError) as exc:
            why = getattr(exc, "strerror", None) or str(exc)
        if stopping():
            raise StartFailed(f"stopped while connecting to the Ray cluster at {_named(address, tried)}")
        if time.monotonic() >= deadline:
            raise UserError(f"--ray-address {_named(address, tried)}: no Ray head answers there ({why}) within "
                            f"{timeout:g}s; start one with `ray start --head` and pass the address it prints")
        time.sleep(_STEP)


def _init_bounded(ray, stopping: Callable[[], bool], address: str | None, **kwargs: Any) -> None:
    """``ray.init`` in a helper thread, so that a stop signal or the time limit ends the wait (a hung
    init is left behind; the process is about to end the job)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            ray.init(address=address, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            box["error"] = exc

    timeout = _seconds("MULTIWORKER_RAY_INIT_TIMEOUT", 180.0)
    thread = threading.Thread(target=run, name="ray-init", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while thread.is_alive():
        thread.join(_STEP)
        where = _named(address, _tried(address)) if address not in (None, "local") else "the local Ray cluster"
        if thread.is_alive() and stopping():
            raise StartFailed(f"stopped while connecting to {where}")
        if thread.is_alive() and time.monotonic() >= deadline:
            raise UserError(f"--ray-address {where}: Ray did not join the cluster within {timeout:g}s; check that "
                            "the address is the head's GCS (HOST:PORT that `ray start --head` prints)")
    if "error" in box:
        raise box["error"]


def connect(address: str | None, code_root: Path | None = None, excludes: list[str] | None = None, *,
            stopping: Callable[[], bool] | None = None) -> Path | None:
    """Join the Ray cluster at ``address`` (None: ``RAY_ADDRESS`` or Ray's own default), once per
    process, shipping ``code_root`` to every node as the job's runtime_env ``working_dir`` (Ray
    accepts a local directory only there, per driver, not per actor). Return the directory that was
    shipped, or None when Ray was already initialized without it (the nodes must then share the path).

    ``ray.init`` installs a SIGTERM handler that exits the process; the launcher's own handlers
    (stop every replica, record Cancelled) are put back afterwards. ``stopping()`` true (a stop
    signal arrived) ends a connection still being made: StartFailed.
    """
    ray = ray_module()
    if ray.is_initialized():
        return _shipped.get("root")
    stopping = stopping or (lambda: False)
    if address is None:
        address = os.environ.get("RAY_ADDRESS") or None
    if address not in (None, "local", "auto"):
        _probe(address, stopping)
    runtime_env = {"working_dir": str(code_root), "excludes": list(excludes or [])} if code_root else None
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        _init_bounded(ray, stopping, address, logging_level=logging.ERROR, log_to_driver=False,
                      include_dashboard=False if address in (None, "local") else None, namespace="multiworker",
                      runtime_env=runtime_env)
    except ray.exceptions.RuntimeEnvSetupError as exc:
        raise UserError(f"working_dir: Ray could not ship {code_root} to the nodes "
                        f"({str(exc).strip().splitlines()[-1]}); keep it small (exclude large files with "
                        f"a .gitignore) or put the data on shared storage") from exc
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = _named(address, _tried(address)) if address else "RAY_ADDRESS / the local cluster"
        raise UserError(f"--ray-address {where}: cannot join a Ray cluster ({str(exc).strip().splitlines()[0]}); "
                        f"start one with `ray start --head` and pass its address") from exc
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)
    log.info("joined the Ray cluster: %s", ray.cluster_resources())
    if code_root:
        _shipped["root"] = code_root
    return code_root


def lost_actor_errors(ray) -> tuple[type[BaseException], ...]:
    """Errors meaning an actor (and so its replica) is gone: the actor died or its node did."""
    ex = ray.exceptions
    return (ex.ActorDiedError, ex.NodeDiedError, ex.WorkerCrashedError, ex.LocalRayletDiedError)


def _nodes(ray, available: bool) -> list[tuple[str, dict[str, Any]]]:
    """(IP, resources) of every alive node: total, or free right now."""
    from ray._private import state

    per_node = state.available_resources_per_node() if available else state.total_resources_per_node()
    return [(n["NodeManagerAddress"], per_node.get(n["NodeID"], {})) for n in ray.nodes() if n.get("Alive")]


def fit_problem(ray, replicas: int, placement: str, *, available: bool = False) -> str | None:
    """Why ``replicas`` bundles of :data:`RESOURCES_PER_REPLICA` cannot be placed (``available``: now),
    in one line naming what is missing against what the cluster has; None when they fit."""
    strategy_of(placement)
    cpu = RESOURCES_PER_REPLICA["CPU"]
    nodes = _nodes(ray, available)
    slots = [math.floor(res.get("CPU", 0.0) / cpu) for _, res in nodes]
    has = "; ".join(f"{ip}: {res.get('CPU', 0):g} CPU" for ip, res in nodes) or "no alive node"
    kind = "free" if available else "in all"
    if placement == "strict_spread":
        usable = sum(1 for s in slots if s >= 1)
        if usable < replicas:
            return (f"placement strict_spread puts each of the {replicas} replicas on its own node with "
                    f"{cpu:g} CPU: needs {replicas} nodes, the cluster has {usable} ({kind}: {has}); "
                    f"add nodes or use --set placement=spread")
        return None
    if sum(slots) < replicas:
        return (f"placement {placement}: {replicas} replicas need {replicas * cpu:g} CPU ({cpu:g} each), "
                f"the cluster has {sum(slots)} replica slots ({kind}: {has}); add nodes or CPUs")
    return None
