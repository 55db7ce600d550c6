"""The launcher's side of the replica fork server (:mod:`multiworker.zygote`).

A ``python -m MODULE`` replica is forked from an interpreter that has already imported TensorFlow,
instead of starting a new one: a restart then costs no TensorFlow import (1.7 s on the measured
host), and a job's replicas import it once between them, not once each. One zygote serves every
replica whose environment matches its own outside the per-replica identity (:data:`IDENTITY`),
across attempts; it starts with the first such replica, in the same interpreter, working
directory, environment and network namespace, and dies with the launcher (PR_SET_PDEATHSIG), its
children with it. ``MULTIWORKER_PRELOAD=0`` (in the launcher's environment or the spec's ``env``)
starts every replica as a new interpreter instead; so does any failure to start or use a zygote.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from multiworker import procs
from multiworker.private_files import open_private

__all__ = ["IDENTITY", "ForkServer", "ForkedChild", "enabled", "module_of"]

log = logging.getLogger(__name__)

#: Variables that differ between replicas or attempts; read by a replica after its start, so a
#: zygote started without them serves every replica of the job.
IDENTITY = ("TF_CONFIG", "CLUSTER_SPEC", "MULTIWORKER_ATTEMPT", "MULTIWORKER_REPLICA")
#: How long the zygote may take to import TensorFlow, and to answer a fork.
READY_TIMEOUT = 120.0
FORK_TIMEOUT = 30.0


def enabled(env: dict[str, str]) -> bool:
    """Whether replicas with this (full) environment may be forked from a zygote."""
    return env.get("MULTIWORKER_PRELOAD", "1").strip().lower() not in ("0", "false", "no", "off")


def module_of(cmd: list[str]) -> tuple[str, list[str]] | None:
    """``(module, args)`` for ``[python, "-m", module, *args]``, else None (forked only then)."""
    if len(cmd) >= 3 and cmd[1] == "-m" and not cmd[2].startswith("-"):
        return cmd[2], list(cmd[3:])
    return None


def zygote_env(env: dict[str, str]) -> dict[str, str]:
    """What a zygote for replicas with environment ``env`` runs with."""
    return {k: v for k, v in env.items() if k not in IDENTITY}


class ForkedChild:
    """A replica forked by a zygote: the parts of ``Popen`` the group and ``procs`` use."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid = server, pid
        self.start_ticks = procs.start_ticks(pid)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.pump()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout)
            time.sleep(0.01)
        return self.returncode


class ForkServer:
    """One zygote process and the children it forked."""

    def __init__(self, python: str, cwd: Path, env: dict[str, str], log_path: Path, *,
                 enter: Callable[[], None] | None = None, label: list[str] | None = None):
        self.proc = procs.spawn([python, "-m", "multiworker.zygote", *(label or [])], cwd=cwd,
                                env=zygote_env(env), log_path=log_path, enter=enter, pipes=True)
        self._out = self.proc.stdout.fileno()
        os.set_blocking(self._out, False)
        self._pending = b""
        self._replies: list[dict] = []
        self._children: dict[int, ForkedChild] = {}
        self.closed = False
        self.why: str | None = None

    # -- messages --------------------------------------------------------------------
    def pump(self, block: float = 0.0) -> None:
        """Read what the zygote said (waiting up to ``block`` seconds for something)."""
        if self.closed:
            return
        deadline = time.monotonic() + block
        while True:
            try:
                data = os.read(self._out, 1 << 16)
            except BlockingIOError:
                data = None
            if data == b"":
                self._lost("the fork server exited")
                return
            if data:
                self._pending += data
                self._dispatch()
                if block <= 0 or self._replies:
                    return
            elif block <= 0 or time.monotonic() >= deadline or self._replies:
                return
            else:
                time.sleep(0.005)

    def _dispatch(self) -> None:
        while b"\n" in self._pending:
            line, self._pending = self._pending.split(b"\n", 1)
            message = json.loads(line)
            if "exit" in message:
                child = self._children.pop(message["exit"], None)
                if child is not None:
                    child.returncode = int(message["code"])
                continue
            if "forked" in message:  # registered now: its exit may follow in the same read
                pid = message["forked"]
                message["child"] = self._children[pid] = ForkedChild(self, pid)
            self._replies.append(message)

    def _reply(self, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while not self._replies and not self.closed and time.monotonic() < deadline:
            self.pump(block=min(0.1, max(0.0, deadline - time.monotonic())))
        return self._replies.pop(0) if self._replies else None

    def _lost(self, why: str, *, warn: bool = True) -> None:
        """The zygote is gone: so are its children (their death signal)."""
        if warn and not self.closed:
            log.warning("%s; replicas start as new interpreters from now on", why)
        self.closed, self.why = True, self.why or why
        for child in self._children.values():
            child.returncode = -signal.SIGKILL
        self._children.clear()

    # -- the public side ----------------------------------------------------------------
    def wait_ready(self, timeout: float = READY_TIMEOUT) -> bool:
        """Block until the zygote has imported the preloads; False (with ``why``) if it cannot serve."""
        reply = self._reply(timeout)
        if reply is None or not reply.get("ready"):
            self.why = (reply or {}).get("why") or self.why or f"no answer in {timeout:g}s"
            self.close()
            return False
        return True

    def fork(self, module: str, args: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> ForkedChild:
        """Fork one replica; OSError if the zygote cannot."""
        if self.closed:
            raise OSError(f"the fork server is gone: {self.why}")
        with open_private(log_path):  # it exists once the replica has started, as a spawned one's does
            pass
        request = {"module": module, "args": args, "cwd": str(cwd), "env": env, "log": str(log_path)}
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError as exc:
            self._lost(f"the fork server stopped reading: {exc}")
            raise OSError(f"the fork server is gone: {self.why}") from exc
        reply = self._reply(FORK_TIMEOUT)
        if reply is None or "forked" not in reply:
            why = (reply or {}).get("error") or self.why or f"no answer in {FORK_TIMEOUT:g}s"
            self.close()
            raise OSError(f"the fork server could not start the replica: {why}")
        return reply["child"]

    def close(self) -> None:
        """Stop the zygote (its children, if any are left, die with it) and reap it."""
        self._lost(self.why or "closed", warn=False)
        if self.proc.poll() is None:  # it holds no state: no need to wait for its interpreter's exit
            self.proc.kill()
        self.proc.wait()
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        with contextlib.suppress(OSError):
            self.proc.stdout.close()
