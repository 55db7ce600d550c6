"""LocalGroup, the local ReplicaGroup, with real (tiny) processes: placement on 127.0.0.1, the
environment, incremental log reads, signals and stops, and nothing left after close."""

from __future__ import annotations

import signal
import sys
import time

from multiworker.backends.local import LocalGroup
from multiworker.cluster import ReplicaId
from multiworker.procs import pid_alive

W0, W1 = ReplicaId("worker", 0), ReplicaId("worker", 1)
PRINT_THEN_WAIT = "import os, sys, time; print(os.environ['MARK'], 'TF_CONFIG' in os.environ, flush=True); time.sleep(60)"


def _wait(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_local_group_lifecycle(tmp_path, monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{}")  # the launcher's own: never inherited by a replica
    group = LocalGroup()
    placements = group.place([W0, W1], attempt=0)
    assert {p.host for p in placements.values()} == {"127.0.0.1"}
    assert len({p.port for p in placements.values()}) == 2
    pids = {}
    for rid in (W0, W1):
        pids[rid] = group.start(rid, [sys.executable, "-c", PRINT_THEN_WAIT], tmp_path, {"MARK": rid.name},
                                tmp_path / f"{rid.name}.log")
    assert _wait(lambda: (tmp_path / "worker-1.log").stat().st_size > 0)
    assert group.read_log(W1) == b"worker-1 False\n" and group.read_log(W1) == b""  # incremental
    assert group.poll() == {W0: None, W1: None}
    assert _wait(lambda: any(name == "worker-0" for name, _, _ in group.samples()))
    assert group.signal(W1, signal.SIGKILL)
    assert _wait(lambda: group.poll()[W1] == -signal.SIGKILL)
    assert not group.signal(W1, signal.SIGKILL)  # not running any more
    group.stop([W0, W1], grace=5.0)
    assert group.poll()[W0] == -signal.SIGTERM
    group.close()
    assert group.poll() == {} and not any(pid_alive(p) for p in pids.values())
    # placed again for the next attempt
    assert set(group.place([W0], attempt=1)) == {W0}
