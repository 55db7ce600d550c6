"""The per-replica Ray actor: lives on one node for one attempt, reserves the replica's port there,
starts the replica process the way ``procs.spawn`` does, and hands back its exit code, new log bytes
and resource use.

Plain class, made a Ray actor by :mod:`.group` (``ray.remote(ReplicaHost)``); it runs on the node, so
it imports only the standard library, psutil, ``multiworker.procs`` and ``multiworker.stacks``. Methods run on the actor's
main thread, which matters: PR_SET_PDEATHSIG fires when the *thread* that forked the replica ends,
i.e. when the actor's worker process dies (killed actor, lost driver, lost node).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

from multiworker import procs, stacks

__all__ = ["ReplicaHost"]

_LOG_CHUNK = 1 << 20


class ReplicaHost:
    """One replica's foothold on its node."""

    def __init__(self, job_id: str, replica: str):
        self.replica = replica
        self._dir = Path(tempfile.mkdtemp(prefix=f"multiworker-{job_id}-{replica}-"))
        self._log = self._dir / f"{replica}.log"
        self._sock: socket.socket | None = None
        self._proc = None
        self._offset = 0
        self._psutil = None
        self._host = ""

    def reserve(self) -> dict:
        """The node's IP, Ray node id and a free port held open (bound, not listening) until start."""
        import ray

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("", 0))
        ctx = ray.get_runtime_context()
        self._host = ray.util.get_node_ip_address()
        return {"host": self._host, "port": self._sock.getsockname()[1],
                "node": ctx.get_node_id(), "cwd": os.getcwd(), "python": sys.executable}

    def sees(self, path: str) -> bool:
        """Whether ``path`` exists on this node (is the output dir shared storage?)."""
        return os.path.exists(path)

    def start(self, cmd: list[str], cwd: str, env: dict[str, str], driver_python: str) -> int:
        """Release the port and start the replica in its own session; return its pid on this node.

        ``cwd`` relative: inside the code Ray shipped (the actor's own cwd); absolute: a shared path.
        """
        workdir = Path(os.getcwd(), cwd)
        if not workdir.is_dir():
            raise FileNotFoundError(f"{workdir} does not exist on this node; ship the code (let "
                                    f"multiworker initialize Ray) or put it on a path every node mounts")
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if cmd and cmd[0] == driver_python and not os.path.exists(driver_python):
            cmd = [sys.executable, *cmd[1:]]  # the driver's interpreter path does not exist here
        self._log.write_text(f"[multiworker] {self.replica} on Ray node {self._host}, cwd {workdir}, "
                             f"TF_CONFIG={env.get('TF_CONFIG', '')}\n")
        self._proc = procs.spawn(cmd, cwd=workdir, env=procs.child_environ(env), log_path=self._log)
        return self._proc.pid

    def tick(self) -> tuple[int | None, bytes]:
        """(raw exit code or None while running, new log bytes)."""
        code = self._proc.poll() if self._proc is not None else None
        return code, self._read()

    def signal(self, signum: int) -> bool:
        if self._proc is None or self._proc.poll() is not None:
            return False
        return procs.signal_group(self._proc.pid, signum)

    def stop(self, grace: float) -> tuple[int | None, bytes]:
        """SIGTERM, ``grace`` seconds, SIGKILL the replica's process group; (exit code, log bytes)."""
        if self._proc is not None:
            procs.stop_groups([self._proc], grace)
        return self.tick()

    def stacks(self) -> dict:
        """The replica's Python stacks, read here on its node (py-spy), as a ``stacks.Dump``'s fields."""
        if self._proc is None or self._proc.poll() is not None:
            return dataclasses.asdict(stacks.Dump(self.replica, None, "gone", error="the replica is not running"))
        return dataclasses.asdict(stacks.dump(self.replica, self._proc.pid))

    def sample(self) -> tuple[float, int] | None:
        """(CPU %, RSS bytes) of the replica and its children; None when it is not running."""
        import psutil

        if self._proc is None or self._proc.poll() is not None:
            return None
        try:
            if self._psutil is None:
                self._psutil = psutil.Process(self._proc.pid)
            members = [self._psutil, *self._psutil.children(recursive=True)]
            return sum(p.cpu_percent(None) for p in members), sum(p.memory_info().rss for p in members)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            return None

    def close(self) -> bytes:
        """Kill what is left of the replica, remove the node-side log; return its unread bytes."""
        if self._proc is not None:
            procs.stop_groups([self._proc], 0.0)
        rest = self._read(everything=True)
        if self._sock is not None:
            self._sock.close()
        shutil.rmtree(self._dir, ignore_errors=True)
        return rest

    def _read(self, everything: bool = False) -> bytes:
        with contextlib.suppress(OSError), open(self._log, "rb") as f:
            f.seek(self._offset)
            data = f.read() if everything else f.read(_LOG_CHUNK)
            self._offset += len(data)
            return data
        return b""
