"""A private network namespace per local job, so other hosts cannot reach its replicas.

TensorFlow's gRPC servers listen on every interface with no authentication, whatever TF_CONFIG
says: on the host's network any machine that reaches it could run ops in a replica. So every
replica of a job joins one namespace of the job's own, which has only loopback, up: replicas reach
each other on 127.0.0.1 and nothing else reaches them (nor do they reach the network).

* as root with iproute2: the named namespace ``mw-<job id>`` (``ip netns``), deleted when the job
  ends, or by the watchdog / Lost cleanup when its driver died;
* otherwise, where unprivileged user namespaces are allowed: a holder process that unshares a user
  and a network namespace (mapping only the user's own uid), which replicas join; the namespace
  goes away with the holder and the replicas, which all die with the driver.

``MULTIWORKER_NETNS=0`` opts out.
"""

from __future__ import annotations

import ctypes
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

from multiworker import procs

__all__ = ["JobNetwork", "NETNS_ENV", "open_job_network", "remove_job_network", "netns_name"]

log = logging.getLogger(__name__)

NETNS_ENV = "MULTIWORKER_NETNS"
_NETNS_DIR = Path("/run/netns")
_CLONE_NEWNET = 0x40000000
_CLONE_NEWUSER = 0x10000000
# The holder of an unnamed namespace: unshare, map the user's own ids, bring loopback up (SIOCGIFFLAGS,
# SIOCSIFFLAGS with IFF_UP), say "ready", then hold it until the launcher closes stdin or dies.
_HOLDER = r"""
import ctypes, fcntl, os, socket, struct, sys
flags = int(sys.argv[1])
uid, gid = os.getuid(), os.getgid()
libc = ctypes.CDLL("libc.so.6", use_errno=True)
if libc.unshare(flags) != 0:
    sys.exit("unshare: " + os.strerror(ctypes.get_errno()))
if flags & 0x10000000:
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
lo = struct.unpack("16sH22x", fcntl.ioctl(s, 0x8913, struct.pack("16sH22x", b"lo", 0)))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH22x", b"lo", lo | 1))
print("ready", flush=True)
sys.stdin.read()
"""


def netns_name(job_id: str) -> str:
    return f"mw-{job_id}"


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)


class JobNetwork:
    """An open handle on a job's namespace; ``enter`` moves the calling process into it."""

    def __init__(self, name: str, fds: list[tuple[int, int]], *, job_id: str | None = None,
                 holder: subprocess.Popen | None = None):
        self.name = name
        self._fds = fds  # (fd, namespace type), joined in this order
        self._job_id = job_id  # a named namespace, deleted on close
        self._holder = holder
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)  # loaded here, not between fork and exec

    def enter(self) -> None:
        """Join the namespace (runs in a replica between fork and exec; raising stops the start)."""
        for fd, nstype in self._fds:
            if self._libc.setns(fd, nstype) != 0:
                raise OSError(ctypes.get_errno(), f"cannot enter network namespace {self.name}")

    def close(self) -> None:
        """Let the namespace go (it disappears once its last replica has exited)."""
        for fd, _ in self._fds:
            os.close(fd)
        self._fds = []
        if self._job_id is not None:
            remove_job_network(self._job_id)
        if self._holder is not None:
            self._holder.kill()
            self._holder.wait()


def open_job_network(job_id: str, *, named: bool | None = None) -> tuple[JobNetwork | None, str]:
    """The job's private namespace, with loopback up; or (None, why it runs without one).

    ``named``: force one way (tests); by default a named namespace as root with ``ip``, else a
    holder process."""
    if os.environ.get(NETNS_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return None, f"{NETNS_ENV}=0 is set"
    if os.uname().sysname != "Linux":
        return None, "private network namespaces need Linux"
    if named is None:
        named = os.geteuid() == 0 and shutil.which("ip") is not None
    return _named_network(job_id) if named else _held_network(job_id)


def _held_network(job_id: str) -> tuple[JobNetwork | None, str]:
    flags = _CLONE_NEWNET | (0 if os.geteuid() == 0 else _CLONE_NEWUSER)
    holder = subprocess.Popen([sys.executable, "-c", _HOLDER, str(flags)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                              preexec_fn=procs.die_with_parent)
    if holder.stdout.readline().strip() != "ready":
        holder.kill()
        _, err = holder.communicate()
        why = err.strip().splitlines()[-1] if err.strip() else f"exit code {holder.returncode}"
        return None, f"cannot create a network namespace without root ({why})"
    kinds = (("user", _CLONE_NEWUSER),) if flags & _CLONE_NEWUSER else ()
    fds = [(os.open(f"/proc/{holder.pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC), nstype)
           for kind, nstype in (*kinds, ("net", _CLONE_NEWNET))]
    log.info("job %s: replicas run in the network namespace held by pid %d (loopback only)", job_id, holder.pid)
    return JobNetwork(f"held by pid {holder.pid}", fds, holder=holder), ""


def _named_network(job_id: str) -> tuple[JobNetwork | None, str]:
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
    return JobNetwork(name, [(fd, _CLONE_NEWNET)], job_id=job_id), ""


def remove_job_network(job_id: str) -> None:
    """Delete the job's namespace if it exists (its group closed, or its driver is gone)."""
    name = netns_name(job_id)
    if not (_NETNS_DIR / name).exists():
        return
    done = _ip("netns", "delete", name)
    if done.returncode != 0:
        log.warning("could not delete network namespace %s: %s", name, done.stderr.strip())
