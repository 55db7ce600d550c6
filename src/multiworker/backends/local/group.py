"""The local replica group: every replica a process on this machine, listening on 127.0.0.1 and a
free port chosen anew for each attempt, in its own session, killed by the kernel if the launcher
dies (``procs.spawn``); its output goes straight into its log file, read back incrementally.
A ``python -m MODULE`` replica is forked from a zygote that has imported TensorFlow already
(:mod:`~multiworker.backends.local.forkserver`), unless ``MULTIWORKER_PRELOAD=0``.

With a :class:`~multiworker.netns.JobNetwork`, every replica joins the job's private
network namespace; without one, ports come from the home's reservations, so concurrent jobs
cannot be handed the same port."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from multiworker import procs, stacks
from multiworker.backends.base import Placement, ReplicaGroup
from multiworker.backends.local import forkserver
from multiworker.backends.log_tails import LogTails
from multiworker.cluster import ReplicaId
from multiworker.netns import JobNetwork
from multiworker.ports import PortReservations

__all__ = ["LocalGroup", "REPLICA_SITE"]

#: A directory whose ``sitecustomize`` corrects tf-keras's in-epoch logs under several workers
#: (``multiworker/_replica_site/sitecustomize.py``; MULTIWORKER_KERAS_LOG_FIX=0 turns it off).
REPLICA_SITE = Path(__file__).resolve().parents[2] / "_replica_site"

log = logging.getLogger(__name__)



class LocalGroup(ReplicaGroup):
    """Replicas as local processes (see :class:`~multiworker.backends.base.ReplicaGroup`)."""

    def __init__(self, host: str = "127.0.0.1", *, network: JobNetwork | None = None,
                 ports: PortReservations | None = None, base_env: dict[str, str] | None = None):
        self.host = host
        self.network = network
        self.ports = ports
        self.base_env = dict(base_env or {})  # under each replica's own env (the storage stand-in's)
        self.path_first = str(REPLICA_SITE)  # first on every replica's PYTHONPATH
        self._procs: dict[ReplicaId, procs.Child | forkserver.ForkedChild] = {}
        self._servers: dict[tuple, forkserver.ForkServer | None] = {}  # None: that zygote could not serve
        self._logs = LogTails()
        self._psutil: dict[ReplicaId, object] = {}

    def place(self, replicas: list[ReplicaId], attempt: int) -> dict[ReplicaId, Placement]:
        if self.ports is not None:
            ports = self.ports.reserve(len(replicas), self.host)
        else:
            ports = procs.free_ports(len(replicas), self.host)
        return {rid: Placement(self.host, port) for rid, port in zip(replicas, ports)}

    def start(self, replica: ReplicaId, cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> int:
        full = procs.child_environ({**self.base_env, **env})
        full["PYTHONPATH"] = os.pathsep.join([self.path_first, *filter(None, [full.get("PYTHONPATH")])])
        proc = self._fork(cmd, cwd, full, log_path)
        if proc is None:
            enter = self.network.enter if self.network is not None else None
            proc = procs.spawn(cmd, cwd=cwd, env=full, log_path=log_path, enter=enter)
        self._procs[replica] = proc
        self._logs.add(replica, log_path)
        return proc.pid

    def _fork(self, cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> forkserver.ForkedChild | None:
        """The replica forked from its zygote (started on first use), or None to spawn it anew."""
        target = forkserver.module_of(cmd)
        if target is None or not forkserver.enabled(env):
            return None
        key = (cmd[0], tuple(sorted(forkserver.zygote_env(env).items())))
        if key not in self._servers:
            enter = self.network.enter if self.network is not None else None
            try:
                server = forkserver.ForkServer(cmd[0], cwd, env, log_path.parent / "forkserver.log", enter=enter,
                                               label=cmd[1:3])
            except (OSError, subprocess.SubprocessError) as exc:  # the latter: entering the namespace failed
                log.info("replicas start as new interpreters: the fork server did not start: %s", exc)
                self._servers[key] = None
                return None
            ready = server.wait_ready()
            self._servers[key] = server if ready else None
            if not ready:
                log.info("replicas start as new interpreters: %s", server.why)
        server = self._servers[key]
        if server is None:
            return None
        log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            return server.fork(*target, cwd, env, log_path)
        except OSError as exc:
            log.warning("%s; starting the replica as a new interpreter", exc)
            server.close()
            self._servers[key] = None
            return None

    def poll(self) -> dict[ReplicaId, int | None]:
        return {rid: proc.poll() for rid, proc in self._procs.items()}

    def signal(self, replica: ReplicaId, signum: int) -> bool:
        proc = self._procs.get(replica)
        if proc is None or proc.poll() is not None:
            return False
        return procs.signal_group(proc.pid, signum, proc.start_ticks)

    def stop(self, replicas: list[ReplicaId], grace: float) -> None:
        procs.stop_groups([self._procs[r] for r in replicas if r in self._procs], grace)

    def read_log(self, replica: ReplicaId) -> bytes:
        return self._logs.read(replica)

    def samples(self) -> list[tuple[str, float, int]]:
        """CPU % and RSS of each running replica, its child processes included."""
        import psutil

        rows = []
        for rid, proc in self._procs.items():
            if proc.poll() is not None:
                continue
            try:
                top = self._psutil.get(rid)
                if top is None:
                    top = self._psutil[rid] = psutil.Process(proc.pid)
                members = [top, *top.children(recursive=True)]
                cpu = sum(p.cpu_percent(None) for p in members)
                rss = sum(p.memory_info().rss for p in members)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            rows.append((rid.name, cpu, rss))
        return rows

    def dump_stacks(self, replica: ReplicaId) -> stacks.Dump:
        proc = self._procs.get(replica)
        if proc is None or proc.poll() is not None:
            return stacks.Dump(replica.name, proc.pid if proc else None, "gone", error="the replica is not running")
        return stacks.dump(replica.name, proc.pid)

    def close(self) -> None:
        """Forget this attempt's processes (the controller has stopped them; any left are killed)
        and give back its ports."""
        left = [p for p in self._procs.values() if p.poll() is None]
        if left:
            log.warning("closing the group with %d replica(s) still running; killing them", len(left))
            procs.stop_groups(left, 0.0)
        if self.ports is not None:
            self.ports.release()
        self._procs.clear()
        self._logs.clear()
        self._psutil.clear()

    def shutdown(self) -> None:
        """After the job's last attempt: stop the fork servers."""
        for server in self._servers.values():
            if server is not None:
                server.close()
        self._servers.clear()
