"""``RayGroup``: the replicas of one attempt, each a process started on a Ray node by its own actor
(:class:`.actor.ReplicaHost`) placed through a placement group with one bundle per replica.

The driver (this process) owns the actors and the placement group, so both die with it, and every
replica with its actor (PR_SET_PDEATHSIG). The trainer code travels as each actor's runtime_env
``working_dir``; logs stream back into the same :class:`LogLayout` files a local job has.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from multiworker.backends.base import Placement, ReplicaGroup
from multiworker.backends.ray.actor import ReplicaHost
from multiworker.backends.ray.cluster import (
    RESOURCES_PER_REPLICA,
    connect,
    fit_problem,
    is_url,
    lost_actor_errors,
    ray_module,
    strategy_of,
)
from multiworker.cluster import ReplicaId
from multiworker.errors import StartFailed, UserError
from multiworker.spec.model import JobSpec
from multiworker.stacks import Dump

__all__ = ["RayGroup"]

log = logging.getLogger(__name__)

_REFRESH_EVERY = 0.2  # seconds between round trips to the actors for exit codes and log bytes
_CALL_TIMEOUT = 30.0
_LOST_EXIT = -signal.SIGKILL  # a replica whose actor or node died went down with it


PLACEMENT_TIMEOUT_ENV = "MULTIWORKER_RAY_PLACEMENT_TIMEOUT"
_PLACEMENT_TIMEOUT = 60.0


def _placement_timeout() -> float:
    """Seconds ``place`` waits for busy resources: ``MULTIWORKER_RAY_PLACEMENT_TIMEOUT``, else 60."""
    raw = os.environ.get(PLACEMENT_TIMEOUT_ENV, "").strip()
    if not raw:
        return _PLACEMENT_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise UserError(f"{PLACEMENT_TIMEOUT_ENV}: {raw!r} is not a number of seconds; set it to e.g. 60, or unset it")
    return value


class RayGroup(ReplicaGroup):
    """Replicas of a job on a Ray cluster. ``place`` is called once per attempt, ``close`` after it.

    ``placement_timeout``: how long ``place`` waits for busy resources (the placement group; past it
    the attempt is a :class:`StartFailed`, retried by the restart policy); default: the environment
    variable ``MULTIWORKER_RAY_PLACEMENT_TIMEOUT`` (seconds), else 60."""

    def __init__(self, spec: JobSpec, job_id: str, *, base_dir: Path, output_dir: str,
                 address: str | None = None, placement: str | None = None, placement_timeout: float | None = None,
                 stopping: Callable[[], bool] | None = None):
        self.spec = spec
        self.stopping = stopping or (lambda: False)  # a stop signal arrived: stop connecting
        self.job_id = job_id
        self.base_dir = Path(base_dir)
        self.output_dir = output_dir
        self.address = address
        self.placement = placement or "spread"
        self.placement_timeout = _placement_timeout() if placement_timeout is None else placement_timeout
        self._pg = None
        self._actors: dict[ReplicaId, Any] = {}
        self._where: dict[ReplicaId, Placement] = {}
        self._logs: dict[ReplicaId, Path] = {}
        self._pending: dict[ReplicaId, bytearray] = {}
        self._codes: dict[ReplicaId, int | None] = {}
        self._last_refresh = 0.0
        self._shipped: Path | None = None

    # -- placement ---------------------------------------------------------------------------
    def place(self, replicas: list[ReplicaId], attempt: int) -> dict[ReplicaId, Placement]:
        ray = ray_module()
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self._reset()
        self._shipped = connect(self.address, self._code_root(), self._excludes(), stopping=self.stopping)
        problem = fit_problem(ray, len(replicas), self.placement)
        if problem:  # too small a cluster is the user's to fix; after a restart, a node may come back
            raise (StartFailed if attempt else UserError)(problem)
        self._pg = placement_group([dict(RESOURCES_PER_REPLICA) for _ in replicas],
                                   strategy=strategy_of(self.placement), name=f"multiworker-{self.job_id}-{attempt}")
        ready, _ = ray.wait([self._pg.ready()], timeout=self.placement_timeout)
        if not ready:
            detail = fit_problem(ray, len(replicas), self.placement, available=True) or "resources are busy"
            self.close()
            raise StartFailed(f"placement: the Ray cluster could not place the job's {len(replicas)} replicas "
                            f"within {self.placement_timeout:g}s: {detail}")
        host_cls = ray.remote(ReplicaHost)
        for rid, i in zip(replicas, self._bundle_order(ray, len(replicas))):
            self._actors[rid] = host_cls.options(
                num_cpus=RESOURCES_PER_REPLICA["CPU"], max_restarts=0,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self._pg, placement_group_bundle_index=i),
            ).remote(self.job_id, rid.name)
        try:
            # the actors' start (a worker process, the shipped working_dir) is not bounded by a short
            # wait for busy resources
            infos = ray.get([a.reserve.remote() for a in self._actors.values()],
                            timeout=max(self.placement_timeout, _CALL_TIMEOUT))
        except ray.exceptions.RuntimeEnvSetupError as exc:
            self.close()
            raise UserError(f"working_dir: Ray could not ship it to the nodes as a runtime_env "
                            f"({str(exc).strip().splitlines()[-1]}); keep it small or exclude large files "
                            f"with a .gitignore") from exc
        for rid, info in zip(self._actors, infos):
            self._where[rid] = Placement(host=info["host"], port=info["port"], node=info["node"])
            self._codes[rid] = None
        self._check_output_visible(ray)
        log.info("placed %s", ", ".join(f"{r}@{p.address}" for r, p in self._where.items()))
        return dict(self._where)

    def _bundle_order(self, ray, n: int) -> list[int]:
        """Bundles on this (the driver's) node first, then by node: the chief, or worker 0, lands
        where the launcher runs when the placement allows, and the rest in a repeatable order."""
        nodes = ray.util.placement_group_table(self._pg).get("bundles_to_node_id", {})
        here = ray.get_runtime_context().get_node_id()
        return sorted(range(n), key=lambda i: (nodes.get(i) != here, str(nodes.get(i)), i))

    def _workdir(self, role: str) -> Path:
        return (self.base_dir / (self.spec.resolved(role).working_dir or ".")).resolve()

    def _code_root(self) -> Path:
        """The smallest directory holding every pool's working_dir: what is shipped to the nodes."""
        dirs = [str(self._workdir(role)) for role in self.spec.pools]
        return Path(os.path.commonpath(dirs))

    def _excludes(self) -> list[str]:
        """Keep the output dir out of the shipped code when it lies inside it."""
        root, out = self._code_root(), Path(self.output_dir)
        if is_url(self.output_dir) or not out.resolve().is_relative_to(root):
            return []
        return [f"/{out.resolve().relative_to(root)}"]

    def _check_output_visible(self, ray) -> None:
        """Every node must see ``output_dir``: the chief writes the model, every replica its backups."""
        if is_url(self.output_dir):
            return
        out = Path(self.output_dir)
        out.mkdir(parents=True, exist_ok=True)
        marker = out / f".multiworker-visible-{uuid.uuid4().hex}"
        marker.touch()
        try:
            seen = ray.get([a.sees.remote(str(marker)) for a in self._actors.values()], timeout=_CALL_TIMEOUT)
        finally:
            marker.unlink(missing_ok=True)
        blind = sorted({self._where[rid].host for rid, ok in zip(self._actors, seen) if not ok})
        if blind:
            self.close()
            raise UserError(f"output_dir: {self.output_dir} is not visible on Ray node(s) {', '.join(blind)}; "
                            f"every node must see it: set output_dir to a path all nodes mount (NFS) "
                            f"or a gs:// / s3:// URL")

    # -- running -------------------------------------------------------------------------------
    def start(self, replica: ReplicaId, cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> int:
        ray = ray_module()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.touch()
        self._logs[replica] = log_path
        self._pending[replica] = bytearray()
        # Shipped code: the actor starts in the unpacked copy of the code root; run from the pool's
        # working_dir inside it. Otherwise the nodes share the path.
        workdir = self._workdir(replica.role)
        where = str(workdir.relative_to(self._shipped)) if self._shipped else str(workdir)
        try:
            return ray.get(self._actors[replica].start.remote(cmd, where, dict(env), sys.executable),
                           timeout=_CALL_TIMEOUT)
        except ray.exceptions.RayTaskError as exc:
            raise UserError(f"working_dir: could not start {replica} on node {self._where[replica].host}: "
                            f"{exc.cause if getattr(exc, 'cause', None) else exc}") from exc

    def poll(self) -> dict[ReplicaId, int | None]:
        self._refresh()
        return {rid: self._codes.get(rid) for rid in self._logs}

    def read_log(self, replica: ReplicaId) -> bytes:
        self._refresh()
        data = bytes(self._pending.get(replica, b""))
        if data:
            self._pending[replica].clear()
        return data

    def signal(self, replica: ReplicaId, signum: int) -> bool:
        ray = ray_module()
        actor = self._actors.get(replica)
        if actor is None or self._codes.get(replica) is not None:
            return False
        try:
            return bool(ray.get(actor.signal.remote(signum), timeout=_CALL_TIMEOUT))
        except lost_actor_errors(ray):
            return False

    def stop(self, replicas: list[ReplicaId], grace: float) -> None:
        ray = ray_module()
        calls = {rid: self._actors[rid].stop.remote(grace) for rid in replicas if rid in self._logs}
        for rid, ref in calls.items():
            self._settle(ray, rid, ref, timeout=grace + _CALL_TIMEOUT)

    def samples(self) -> list[tuple[str, float, int]]:
        ray = ray_module()
        running = [rid for rid in self._logs if self._codes.get(rid) is None]
        refs = [self._actors[rid].sample.remote() for rid in running]
        rows = []
        for rid, ref in zip(running, refs):
            try:
                got = ray.get(ref, timeout=_CALL_TIMEOUT)
            except (*lost_actor_errors(ray), ray.exceptions.GetTimeoutError):
                continue
            if got is not None:
                rows.append((rid.name, float(got[0]), int(got[1])))
        return rows

    def dump_stacks(self, replica: ReplicaId) -> Dump:
        ray = ray_module()
        actor = self._actors.get(replica)
        if actor is None or self._codes.get(replica) is not None:
            return Dump(replica.name, None, "gone", error="the replica is not running")
        try:
            return Dump(**ray.get(actor.stacks.remote(), timeout=_CALL_TIMEOUT + 30))
        except (*lost_actor_errors(ray), ray.exceptions.GetTimeoutError) as exc:
            return Dump(replica.name, None, "unknown", error=f"the Ray actor did not answer: {exc!r}"[:300])

    def close(self) -> None:
        """Kill every replica and actor of the attempt and remove its placement group."""
        if not self._actors and self._pg is None:
            return
        ray = ray_module()
        refs = {rid: actor.close.remote() for rid, actor in self._actors.items()}
        for rid, ref in refs.items():
            try:
                rest = ray.get(ref, timeout=_CALL_TIMEOUT)
            except (*lost_actor_errors(ray), ray.exceptions.GetTimeoutError):
                rest = b""
            if rest and rid in self._logs:
                self._append(rid, rest)
        for actor in self._actors.values():
            ray.kill(actor, no_restart=True)
        if self._pg is not None:
            from ray.util.placement_group import remove_placement_group

            remove_placement_group(self._pg)
        self._actors.clear()
        self._pg = None

    # -- helpers ---------------------------------------------------------------------------------
    def _reset(self) -> None:
        self._actors, self._where, self._logs, self._pending, self._codes = {}, {}, {}, {}, {}
        self._pg = None

    def _refresh(self) -> None:
        """One round trip to every live actor: exit codes and new log bytes (at most every 0.2 s)."""
        now = time.monotonic()
        if now - self._last_refresh < _REFRESH_EVERY:
            return
        self._last_refresh = now
        ray = ray_module()
        calls = {rid: self._actors[rid].tick.remote() for rid in self._logs if self._codes.get(rid) is None}
        for rid, ref in calls.items():
            self._settle(ray, rid, ref, timeout=_CALL_TIMEOUT)

    def _settle(self, ray, rid: ReplicaId, ref, *, timeout: float) -> None:
        """Take one (exit code, log bytes) answer; a dead actor or lost node is a SIGKILLed replica."""
        try:
            code, data = ray.get(ref, timeout=timeout)
        except ray.exceptions.GetTimeoutError:
            log.warning("%s: the actor on %s did not answer within %gs", rid, self._where[rid].host, timeout)
            return
        except lost_actor_errors(ray) as exc:
            where = self._where[rid]
            reason = str(exc).strip().splitlines()[0][:300]
            self._append(rid, f"\n[multiworker] the Ray actor running {rid} on node {where.host} died "
                              f"(actor or node lost); the replica went down with it: {reason}\n".encode())
            log.warning("%s: Ray actor on %s lost: %s", rid, where.host, reason)
            if self._codes.get(rid) is None:
                self._codes[rid] = _LOST_EXIT
            return
        if data:
            self._append(rid, data)
        if code is not None and self._codes.get(rid) is None:
            self._codes[rid] = code

    def _append(self, rid: ReplicaId, data: bytes) -> None:
        with open(self._logs[rid], "ab") as f:
            f.write(data)
        self._pending.setdefault(rid, bytearray()).extend(data)

    @property
    def placements(self) -> dict[ReplicaId, Placement]:
        return dict(self._where)
