"""A local job's replicas are unreachable from other hosts: each job runs in a private network
namespace. The "machine" is a namespace (10.212.0.1) joined by a veth pair to an "other host"
namespace (10.212.0.2); the launcher runs on the machine, replicas listen on 0.0.0.0 as
TensorFlow's gRPC servers do, and the other host tries to connect to their ports."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import PROGRAMS, REPO, no_processes_left, status, wait_for

from multiworker.job import Store

MACHINE_IP, OTHER_IP = "10.212.0.1", "10.212.0.2"
_PROBE = """
import socket, sys
for port in sys.argv[2:]:
    try:
        socket.create_connection((sys.argv[1], int(port)), timeout=3).close()
        print("connected")
    except OSError as exc:
        print(type(exc).__name__)
"""


def _why_not() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network namespaces"
    if not shutil.which("ip") or not shutil.which("nsenter"):
        return "needs `ip` (iproute2) and `nsenter` (util-linux): `make sysdeps`"
    return None


pytestmark = [pytest.mark.integration, pytest.mark.skipif(_why_not() is not None, reason=str(_why_not()))]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


@pytest.fixture
def two_hosts():
    """Namespaces (machine, other host) joined by a veth pair; removed afterwards."""
    tag = str(os.getpid())
    machine, other = f"mwx-{tag}-m", f"mwx-{tag}-o"
    veth = (f"mwx{tag}m", f"mwx{tag}o")
    try:
        _ip("netns", "add", machine)
        _ip("netns", "add", other)
        _ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for ns, dev, addr in ((machine, veth[0], MACHINE_IP), (other, veth[1], OTHER_IP)):
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield machine, other
    finally:
        for ns in (machine, other):
            subprocess.run(["ip", "netns", "delete", ns], capture_output=True)


def _in_ns(ns: str, cmd: list[str]) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{ns}", "--", *cmd]


def _run_and_probe(tmp_path: Path, home: Path, two_hosts, netns: str) -> tuple[list[str], dict, list[str]]:
    """Run a two-replica job on the machine; once the replicas reached each other, connect to
    their ports from the other host. Returns (probe results, final status, namespaces seen)."""
    machine, other = two_hosts
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: exposed\nmodule: netpeer\nworking_dir: {PROGRAMS}\npools: {{worker: {{replicas: 2}}}}\n")
    env = {**os.environ, "MULTIWORKER_HOME": str(home), "MULTIWORKER_NETNS": netns,
           "PYTHONPATH": str(REPO / "src")}
    launcher = subprocess.Popen(_in_ns(machine, [sys.executable, "-m", "multiworker", "run", str(spec), "-q"]),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        def ready():
            jobs = Store(home).list_jobs()
            reps = Store(home).replicas(jobs[0].id) if jobs else []
            logs = [Path(r["log_path"]) for r in reps if r["log_path"]]
            done = len(logs) == 2 and all(p.exists() and "reached all peers" in p.read_text() for p in logs)
            return (jobs[0], reps) if done else None

        job, reps = wait_for(ready, timeout=300)
        namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
        probe = subprocess.run(_in_ns(other, [sys.executable, "-c", _PROBE, MACHINE_IP,
                                              *[str(r["port"]) for r in reps]]),
                               capture_output=True, text=True, timeout=60)
        (Path(job.output_dir) / "stop").touch()
        out, _ = launcher.communicate(timeout=300)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    assert launcher.returncode == 0, out
    return probe.stdout.split(), status(home), namespaces


def test_replicas_unreachable_from_another_host(tmp_path, mw_home, two_hosts):
    probes, doc, namespaces = _run_and_probe(tmp_path, mw_home, two_hosts, netns="1")
    assert probes == ["ConnectionRefusedError"] * 2  # nothing listens on the machine's address
    assert doc["state"] == "Succeeded"  # ... while the replicas reached each other on 127.0.0.1
    assert f"mw-{doc['id']}" in namespaces
    events = {e["reason"]: e["message"] for e in Store(mw_home).events(doc["id"])}
    assert f"network namespace mw-{doc['id']}" in events["NetworkIsolated"]
    gone = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    assert f"mw-{doc['id']}" not in gone  # removed when the job ended


def test_opt_out_leaves_replicas_reachable_and_warns(tmp_path, mw_home, two_hosts):
    probes, doc, _ = _run_and_probe(tmp_path, mw_home, two_hosts, netns="0")
    assert probes == ["connected"] * 2  # the exposure the namespace prevents
    events = [e for e in Store(mw_home).events(doc["id"]) if e["reason"] == "Exposed"]
    assert len(events) == 1 and events[0]["type"] == "Warning" and "MULTIWORKER_NETNS=0" in events[0]["message"]


def test_namespace_removed_when_the_launcher_is_killed(tmp_path, mw_home):
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: killed\nmodule: fakejob\nworking_dir: {PROGRAMS}\npools: {{worker: {{replicas: 2}}}}\n")
    env = {**os.environ, "MULTIWORKER_HOME": str(mw_home), "PYTHONPATH": str(REPO / "src")}
    launcher = subprocess.Popen([sys.executable, "-m", "multiworker", "run", str(spec), "-q", "--", "--epochs", "600"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    try:
        job = wait_for(lambda: _running(mw_home), timeout=300)
        assert Path(f"/run/netns/mw-{job.id}").exists()
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait()
    wait_for(lambda: not Path(f"/run/netns/mw-{job.id}").exists(), timeout=30)  # the watchdog's cleanup
    assert no_processes_left(job.id)


def _running(home: Path) -> dict | None:
    store = Store(home)
    jobs = store.list_jobs()
    reps = store.replicas(jobs[0].id) if jobs else []
    return jobs[0] if len(reps) == 2 and all(r["state"] == "Running" for r in reps) else None
