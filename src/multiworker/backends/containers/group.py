"""The container replica group: every replica a container of its pool's image, on the job's private
network, under the hostname its platform gives it, started by an attached ``ENGINE run --rm`` whose
output goes straight into the replica's log file and whose exit code is the container's.

Signals go through the engine (``kill --signal``), stops through ``stop -t GRACE`` (SIGTERM, then
SIGKILL); each container runs under ``--init`` so the trainer is not PID 1 and SIGTERM reaches it. The
job's output directory and every ``--map-path`` directory are bind-mounted at the same path, so
TF_CONFIG, AIP_* and the mapped paths mean the same inside as outside.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from pathlib import Path

from multiworker import procs
from multiworker.backends.base import Placement, ReplicaGroup
from multiworker.backends.log_tails import LogTails
from multiworker.cluster import ReplicaId
from multiworker.containers.engine import LABEL, Engine, network_name
from multiworker.containers.platform import PORT, Host, container_argv, hosts, platform_env
from multiworker.job import JobRecord
from multiworker.private_files import write_private_text

__all__ = ["ContainerGroup"]

log = logging.getLogger(__name__)



class ContainerGroup(ReplicaGroup):
    """Replicas as containers (see :class:`~multiworker.backends.base.ReplicaGroup`)."""

    def __init__(self, record: JobRecord, engine: Engine, images: dict[str, str], mounts: list[str]):
        self.record = record
        self.engine = engine
        self.images = images  # role -> image
        self.mounts = mounts  # host directories bind-mounted at the same path
        self.network = network_name(record.id)
        self.hosts: dict[ReplicaId, Host] = hosts(record.spec, record.format)
        self._configs: dict[str, dict | None] = {}
        self._attempt = 0
        self._procs: dict[ReplicaId, procs.Child] = {}
        self._names: dict[ReplicaId, str] = {}
        self._logs = LogTails()
        self._pids: dict[ReplicaId, object] = {}  # psutil.Process of the container's init, once known
        self._members: dict[ReplicaId, dict[int, object]] = {}  # pid -> psutil.Process under it

    # -- the job's network -----------------------------------------------------------------------
    def open_network(self) -> None:
        self.engine.remove_network(self.network)
        proc = self.engine.call("network", "create", "--internal", "--label", f"{LABEL}={self.record.id}",
                                self.network, timeout=60)
        if proc.returncode != 0:
            from multiworker.errors import StartFailed

            raise StartFailed(f"{self.engine.name} network create {self.network}: {proc.stderr.strip()}")

    # -- ReplicaGroup ----------------------------------------------------------------------------
    def program(self, replica: ReplicaId, trainer_args: list[str]) -> tuple[list[str], Path]:
        role = replica.role
        image = self.images[role]
        if role not in self._configs:
            self._configs[role] = self.engine.image_config(image)
        argv = container_argv(self.record.spec.resolved(role), image, self._configs[role], trainer_args,
                              jobset=self.record.format == "jobset")
        return argv, Path((self._configs[role] or {}).get("WorkingDir") or "/")

    def place(self, replicas: list[ReplicaId], attempt: int) -> dict[ReplicaId, Placement]:
        self._attempt = attempt
        return {rid: Placement(self.hosts[rid].address, PORT, node=self.hosts[rid].hostname) for rid in replicas}

    def start(self, replica: ReplicaId, cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> int:
        name = f"mw-{self.record.id}-{replica.name}-{self._attempt}"
        host = self.hosts[replica]
        full = {**env, **platform_env(self.record.spec, self.record.format, replica, self.hosts)}
        log_path.parent.mkdir(parents=True, exist_ok=True)
        env_file = log_path.with_suffix(".env")
        # values stay off the command line (ps shows it)
        write_private_text(env_file, "".join(f"{k}={v.replace(chr(10), ' ')}\n" for k, v in full.items()))
        run = ["run", "--rm", "--init", "--pull=never", "--name", name, "--hostname", host.hostname,
               "--network", self.network, "--label", f"{LABEL}={self.record.id}", "--env-file", str(env_file),
               "--stop-signal", "SIGTERM"]
        for alias in host.aliases:
            run += ["--network-alias", alias]
        for directory in self.mounts:
            run += ["-v", f"{directory}:{directory}"]
        run += ["--entrypoint", json.dumps(cmd[:1]), self.images[replica.role], *cmd[1:]]
        client_env = procs.child_environ({"MULTIWORKER_JOB_ID": self.record.id,
                                          "MULTIWORKER_REPLICA": replica.name})
        proc = procs.spawn(self.engine.cmd(*run), cwd=Path("/"), env=client_env, log_path=log_path)
        self._procs[replica] = proc
        self._names[replica] = name
        self._logs.add(replica, log_path)
        return proc.pid

    def poll(self) -> dict[ReplicaId, int | None]:
        return {rid: proc.poll() for rid, proc in self._procs.items()}

    def signal(self, replica: ReplicaId, signum: int) -> bool:
        proc = self._procs.get(replica)
        if proc is None or proc.poll() is not None:
            return False
        return self.engine.call("kill", "--signal", str(signum), self._names[replica], timeout=30).returncode == 0

    def stop(self, replicas: list[ReplicaId], grace: float) -> None:
        running = [r for r in replicas if r in self._procs and self._procs[r].poll() is None]
        if not running:
            return
        self.engine.call("stop", "-t", str(max(0, int(round(grace)))), *[self._names[r] for r in running],
                         timeout=grace + 60)
        deadline = time.monotonic() + 30
        for rid in running:
            try:
                self._procs[rid].wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.engine.call("rm", "-f", self._names[rid], timeout=60)
                procs.stop_groups([self._procs[rid]], 0.0)

    def read_log(self, replica: ReplicaId) -> bytes:
        return self._logs.read(replica)

    def samples(self) -> list[tuple[str, float, int]]:
        """CPU % and RSS of each running container's processes (its init and everything under it)."""
        import psutil

        rows = []
        for rid, proc in self._procs.items():
            if proc.poll() is not None:
                continue
            top = self._pids.get(rid)
            if top is None:
                found = self.engine.call("inspect", "--format", "{{.State.Pid}}", self._names[rid], timeout=10)
                pid = found.stdout.strip()
                if found.returncode != 0 or not pid.isdigit() or pid == "0":
                    continue
                try:
                    top = self._pids[rid] = psutil.Process(int(pid))
                except psutil.Error:
                    continue
            known = self._members.setdefault(rid, {})
            try:
                found = [top, *top.children(recursive=True)]  # type: ignore[attr-defined]
                # the same Process objects each time: cpu_percent measures since the previous call on it
                members = [known.setdefault(p.pid, p) for p in found]
                cpu = sum(p.cpu_percent(None) for p in members)
                rss = sum(p.memory_info().rss for p in members)
            except psutil.Error:
                continue
            rows.append((rid.name, cpu, rss))
        return rows

    def close(self) -> None:
        """Forget this attempt's containers; any still there are removed."""
        left = [self._names[r] for r, p in self._procs.items() if p.poll() is None]
        if left:
            log.warning("closing the group with %d container(s) still running; removing them", len(left))
            self.engine.call("rm", "-f", *left, timeout=120)
            procs.stop_groups([p for p in self._procs.values() if p.poll() is None], 5.0)
        for path in self._logs.paths():
            try:
                os.unlink(path.with_suffix(".env"))
            except OSError:
                pass
        self._procs.clear()
        self._names.clear()
        self._logs.clear()
        self._pids.clear()
        self._members.clear()

    def shutdown(self) -> None:
        """After the job's last attempt: remove whatever is left of the job, its network included."""
        self.engine.remove_job(self.record.id)
