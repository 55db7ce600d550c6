"""Process plumbing shared by the launcher, its backends and its readers: free ports, spawning a
child in its own session that dies with its parent, stopping process groups, finding a job's strays.

Every kill checks the process's identity first: a pid is recorded with its start time
(``/proc/<pid>/stat`` field 22), and a pid now held by a process started at another time belongs
to someone else and is never signalled.
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
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from multiworker.private_files import open_private

__all__ = ["free_ports", "spawn", "Child", "child_environ", "signal_group", "stop_groups", "processes_of_job",
           "job_processes", "pid_alive", "same_process", "start_ticks", "die_with_parent"]

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


def start_ticks(pid: int | None) -> int | None:
    """When process ``pid`` started (clock ticks since boot, Linux), or None if it does not exist."""
    if not pid:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


class Child(subprocess.Popen):
    """A ``Popen`` that remembers when its process started (``start_ticks``), read before it can
    be reaped, so a later kill can tell it from a process that reuses its pid."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.start_ticks = start_ticks(self.pid)


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies (run in a child before exec)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def spawn(cmd: list[str], *, cwd: Path, env: dict[str, str], log_path: Path,
          enter: Callable[[], None] | None = None, pipes: bool = False) -> Child:
    """Start one replica in its own session and process group, output appended to ``log_path``
    (created 0600: logs may show secrets).

    The kernel kills it if the launcher dies (PR_SET_PDEATHSIG), so nothing outlives a SIGKILLed
    launcher; the launcher stops the whole process group otherwise. ``enter``, if given, runs in the
    child before exec (e.g. joining the job's network namespace); if it raises, nothing starts.
    ``pipes``: stdin and stdout are pipes to the caller, only stderr goes to the log (a fork server).
    """
    linux = os.uname().sysname == "Linux"

    def preexec() -> None:
        if linux:
            die_with_parent()
        if enter is not None:
            enter()

    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open_private(log_path) as out:
        return Child(
            cmd,
            cwd=str(cwd),
            env=env,
            stdin=subprocess.PIPE if pipes else subprocess.DEVNULL,
            stdout=subprocess.PIPE if pipes else out,
            stderr=out if pipes else subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec if (linux or enter) else None,
        )


def child_environ(extra: Mapping[str, str]) -> dict[str, str]:
    """This process's environment without TF_CONFIG / CLUSTER_SPEC, with ``extra`` over it: what a
    replica started here gets."""
    base = {k: v for k, v in os.environ.items() if k not in _INHERITED_CLUSTER_VARS}
    return {**base, **extra}


def signal_group(pid: int, sig: int, ticks: int | None = None) -> bool:
    """Send ``sig`` to the process group led by ``pid``; False if it is already gone.

    ``ticks``: the start time recorded for ``pid`` (``start_ticks``). If a process now holds
    ``pid`` but started at another time, the pid was reused by someone else: nothing is sent. If
    no process holds it, the group's lingering members (if any) are still ours, since the kernel
    does not reuse a pid that is some live process's group id.
    """
    if ticks is not None:
        now = start_ticks(pid)
        if now is not None and now != ticks:
            log.warning("pid %d now belongs to another process (started later); not sending signal %d", pid, sig)
            return False
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
            signal_group(p.pid, signal.SIGTERM, getattr(p, "start_ticks", None))
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(p.poll() is None for p in procs):
        time.sleep(0.05)
    for p in procs:
        # Kill the group even if the leader exited: its children may linger.
        signal_group(p.pid, signal.SIGKILL, getattr(p, "start_ticks", None))
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


def job_processes(job_id: str) -> dict[int, int]:
    """Live processes whose environment carries MULTIWORKER_JOB_ID=job_id (Linux /proc), as
    pid -> start ticks (pass them to ``signal_group``)."""
    needle = f"MULTIWORKER_JOB_ID={job_id}".encode() + b"\0"
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            status = (entry / "stat").read_text()
        except OSError:
            continue
        if needle in environ + b"\0" and ") Z " not in status:
            found[int(entry.name)] = int(status.rsplit(")", 1)[1].split()[19])
    return found


def processes_of_job(job_id: str) -> list[int]:
    """Pids of live processes whose environment carries MULTIWORKER_JOB_ID=job_id (Linux /proc)."""
    return list(job_processes(job_id))
