"""A private network namespace per local job, so other hosts cannot reach its replicas.

TensorFlow's gRPC servers listen on every interface with no authentication, whatever TF_CONFIG
says: on the host's network any machine that reaches it could run ops in a replica. So, where it
is permitted (root, with iproute2's ``ip``), every replica of a job joins the namespace
``mw-<job id>``, which has only loopback, up: replicas reach each other on 127.0.0.1 and nothing
else reaches them (nor do they reach the network). ``MULTIWORKER_NETNS=0`` opts out.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import subprocess
from pathlib import Path

__all__ = ["JobNetwork", "NETNS_ENV", "open_job_network", "remove_job_network", "netns_name"]

log = logging.getLogger(__name__)

NETNS_ENV = "MULTIWORKER_NETNS"
_NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000


def netns_name(job_id: str) -> str:
    return f"mw-{job_id}"


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)


class JobNetwork:
    """An open handle on a job's namespace; ``enter`` moves the calling process into it."""

    def __init__(self, name: str, fd: int):
        self.name = name
        self._fd = fd
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)  # loaded here, not between fork and exec

    def enter(self) -> None:
        """Join the namespace (runs in a replica between fork and exec; raising stops the start)."""
        if self._libc.setns(self._fd, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"cannot enter network namespace {self.name}")

    def close(self) -> None:
        """Delete the namespace (it disappears once its last replica has exited)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        remove_job_network(self.name.removeprefix("mw-"))


def _unavailable_reason() -> str | None:
    if os.uname().sysname != "Linux":
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "creating a network namespace needs root"
    if shutil.which("ip") is None:
        return "the `ip` command (iproute2) is not installed"
    return None


def open_job_network(job_id: str) -> tuple[JobNetwork | None, str]:
    """The job's private namespace, created with loopback up; or (None, why it runs without one)."""
    if os.environ.get(NETNS_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None, f"{NETNS_ENV}=0 is set"
    why = _unavailable_reason()
    if why:
        return None, why
    name = netns_name(job_id)
    for args in (("netns", "add", name), ("-n", name, "link", "set", "lo", "up")):
        done = _ip(*args)
        if done.returncode != 0:
            remove_job_network(job_id)
            return None, f"`ip {' '.join(args)}` failed: {done.stderr.strip() or done.returncode}"
    try:
        fd = os.open(_NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        remove_job_network(job_id)
        return None, f"cannot open {_NETNS_DIR / name}: {exc.strerror}"
    log.info("job %s: replicas run in network namespace %s (loopback only)", job_id, name)
    return JobNetwork(name, fd), ""


def remove_job_network(job_id: str) -> None:
    """Delete the job's namespace if it exists (its group closed, or its driver is gone)."""
    name = netns_name(job_id)
    if not (_NETNS_DIR / name).exists():
        return
    done = _ip("netns", "delete", name)
    if done.returncode != 0:
        log.warning("could not delete network namespace %s: %s", name, done.stderr.strip())
