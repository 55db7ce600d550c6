"""Process plumbing shared by the launcher, its backends and its readers: free ports, spawning a
child in its own session that dies with its parent, stopping process groups, finding a job's strays.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

__all__ = ["free_ports", "spawn", "child_environ", "signal_group", "stop_groups", "processes_of_job", "pid_alive",
           "same_process"]

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
# A replica must not inherit the launcher's own cluster identity.
_INHERITED_CLUSTER_VARS = ("TF_CONFIG", "CLUSTER_SPEC")


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free TCP ports on ``host`` (held together while chosen, so they differ)."""
    sockets = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def spawn(cmd: list[str], *, cwd: Path, env: dict[str, str], log_path: Path) -> subprocess.Popen:
    """Start one replica in its own session and process group, output appended to ``log_path``.

    The kernel kills it if the launcher dies (PR_SET_PDEATHSIG), so nothing outlives a SIGKILLed
    launcher; the launcher stops the whole process group otherwise.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab", buffering=0) as out:
        return subprocess.Popen(
            cmd,
            cwd=str(cwd),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if os.uname().sysname == "Linux" else None,
        )


def child_environ(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without TF_CONFIG / CLUSTER_SPEC, with ``extra`` over it: what a
    replica started here gets."""
    base = {k: v for k, v in os.environ.items() if k not in _INHERITED_CLUSTER_VARS}
    return {**base, **extra}


def signal_group(pid: int, sig: int) -> bool:
    """Send ``sig`` to the process group led by ``pid``; False if it is already gone."""
    try:
        os.killpg(pid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            return True
        return False


def stop_groups(procs: Iterable[subprocess.Popen], grace: float) -> None:
    """SIGTERM every group, wait up to ``grace`` seconds, then SIGKILL what is left, and reap."""
    procs = [p for p in procs if p is not None]
    for p in procs:
        if p.poll() is None:
            signal_group(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        # Kill the group even if the leader exited: its children may linger.
        signal_group(p.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=5)


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this pid exists (and is not a zombie)."""
    if not pid:
        return False
    try:
        import psutil

        proc = psutil.Process(pid)
        return proc.status() != psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001 - psutil.NoSuchProcess, AccessDenied, ImportError
        return False


def same_process(pid: int | None, last_seen: float) -> bool:
    """Whether ``pid`` is alive and is the process last seen at ``last_seen`` (epoch seconds), not a
    later one that reuses its pid: a process born after ``last_seen`` is someone else."""
    if not pid_alive(pid):
        return False
    try:
        import psutil

        created = psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone meanwhile, or no access: trust the pid
        return pid_alive(pid)
    return created <= last_seen + 2.0


def processes_of_job(job_id: str) -> list[int]:
    """Pids of live processes whose environment carries MULTIWORKER_JOB_ID=job_id (Linux /proc)."""
    needle = f"MULTIWORKER_JOB_ID={job_id}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            status = (entry / "stat").read_text()
        except OSError:
            continue
        if needle in environ + b"\0" and ") Z " not in status:
            found.append(int(entry.name))
    return found
