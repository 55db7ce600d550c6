"""A real two-host Ray cluster on this machine: two network namespaces joined by a veth pair, with
addresses that exist only inside them, a Ray head in one and a Ray worker node in the other.

Each ``ray start --block`` is started with Popen in its own session and stopped by that session
(SIGTERM, then SIGKILL to every process left in it), never with ``ray stop``, which would end every
Ray process on the machine.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HEAD_IP, NODE_IP = "10.211.0.1", "10.211.0.2"
PORT = 6379
#: for the nodes and every driver: no token auth (a ~/.ray/auth_token left by another Ray would
#: otherwise turn it on for the head only), no usage stats, no inherited address
RAY_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0", "RAY_ADDRESS": ""}


def unavailable_reason() -> str | None:
    """Why the cluster cannot be built here (None when it can)."""
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if shutil.which("ip") is None:
        return "needs the `ip` command (iproute2; `make sysdeps`)"
    if not (Path(sys.executable).parent / "ray").exists():
        return "needs the ray CLI (pip install 'multiworker[ray]')"
    return None


def session_members(sid: int) -> list[int]:
    """Pids of live processes in session ``sid`` (from /proc/<pid>/stat)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[3]) == sid:
            found.append(int(entry.name))
    return found


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class TwoHostRay:
    """Namespaces ``head_ns`` (10.211.0.1) and ``node_ns`` (10.211.0.2), a Ray node in each."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.head_ns, self.node_ns = f"mwray-{tag}-a", f"mwray-{tag}-b"
        self._veth = (f"mwr{tag}a", f"mwr{tag}b")
        self.address = f"{HEAD_IP}:{PORT}"
        self.tmp = Path(tempfile.mkdtemp(prefix=f"ray-mw{tag}-"))
        self._procs: list[subprocess.Popen] = []

    def exec_in(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def start(self, timeout: float = 90.0) -> None:
        _ip("netns", "add", self.head_ns)
        _ip("netns", "add", self.node_ns)
        a, b = self._veth
        _ip("link", "add", a, "type", "veth", "peer", "name", b)
        for ns, dev, ip in ((self.head_ns, a, HEAD_IP), (self.node_ns, b, NODE_IP)):
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", dev, "up")
        ray = str(Path(sys.executable).parent / "ray")
        common = ["--object-store-memory", "100000000", "--num-cpus", "2", "--block", "--disable-usage-stats"]
        self._spawn(self.head_ns, "head", [ray, "start", "--head", "--node-ip-address", HEAD_IP, "--port", str(PORT),
                                           "--include-dashboard=false", "--temp-dir", str(self.tmp / "a"), *common])
        self._wait_started("head", timeout)
        self._spawn(self.node_ns, "node", [ray, "start", "--address", self.address, "--node-ip-address", NODE_IP,
                                           "--temp-dir", str(self.tmp / "b"), *common])
        self._wait_started("node", timeout)

    def _spawn(self, ns: str, name: str, cmd: list[str]) -> None:
        env = {**os.environ, **RAY_ENV}
        with open(self.tmp / f"{name}.log", "ab") as out:
            self._procs.append(subprocess.Popen([*self.exec_in(ns), *cmd], stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, env=env, start_new_session=True))

    def _wait_started(self, name: str, timeout: float) -> None:
        log = self.tmp / f"{name}.log"
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if "Ray runtime started" in log.read_text(errors="replace"):
                return
            if self._procs[-1].poll() is not None:
                break
            time.sleep(0.2)
        raise RuntimeError(f"ray {name} did not start: {log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        for proc in reversed(self._procs):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        end = time.monotonic() + 5
        while time.monotonic() < end and any(session_members(p.pid) for p in self._procs):
            time.sleep(0.2)
        for proc in self._procs:
            for pid in session_members(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            proc.wait(timeout=10)
        for ns in (self.head_ns, self.node_ns):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def net_ns_of(self, pid: int) -> str | None:
        """Which of the two namespaces ``pid`` runs in (None: neither)."""
        try:
            ino = os.stat(f"/proc/{pid}/ns/net").st_ino
        except OSError:
            return None
        for ns in (self.head_ns, self.node_ns):
            if os.stat(f"/run/netns/{ns}").st_ino == ino:
                return ns
        return None
