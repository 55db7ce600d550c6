"""Port reservations: concurrent jobs (several processes reserving at once) never get the same
port; released and dead owners' ports are given back."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from multiworker.backends.local import LocalGroup
from multiworker.cluster import ReplicaId
from multiworker.ports import PortReservations

# Each process reserves 40 times 3 ports and keeps them all, as 40 running jobs would.
_RESERVER = """
import json, sys
from multiworker.ports import PortReservations
r = PortReservations(sys.argv[1])
print(json.dumps([r.reserve(3) for _ in range(40)]), flush=True)
sys.stdin.read()  # hold them until the test has read every process's ports
"""


def test_concurrent_reservations_never_collide(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    workers = [subprocess.Popen([sys.executable, "-c", _RESERVER, str(tmp_path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True, env=env) for _ in range(6)]
    try:
        batches = [json.loads(w.stdout.readline()) for w in workers]
    finally:
        for w in workers:
            w.communicate(timeout=30)
    ports = [p for batch in batches for ports in batch for p in ports]
    assert len(ports) == 6 * 40 * 3
    assert len(set(ports)) == len(ports), "two reservations got the same port"
    # every owner has exited: the next reservation reclaims all their entries
    PortReservations(tmp_path).reserve(1)
    assert len(json.loads((tmp_path / "ports" / "reserved.json").read_text())) == 1


def test_release_and_group_close(tmp_path):
    mine, other = PortReservations(tmp_path), PortReservations(tmp_path)
    kept = set(other.reserve(2))
    group = LocalGroup(ports=mine)
    placed = group.place([ReplicaId("worker", 0), ReplicaId("worker", 1)], attempt=0)
    table = json.loads((tmp_path / "ports" / "reserved.json").read_text())
    assert {p.port for p in placed.values()} | kept == {int(p) for p in table}
    assert not kept & {p.port for p in placed.values()}
    group.close()  # gives back this group's ports only
    assert {int(p) for p in json.loads((tmp_path / "ports" / "reserved.json").read_text())} == kept


def test_unreadable_registry_is_replaced(tmp_path):
    (tmp_path / "ports").mkdir()
    (tmp_path / "ports" / "reserved.json").write_text("{not json")
    (port,) = PortReservations(tmp_path).reserve(1)
    assert list(json.loads((tmp_path / "ports" / "reserved.json").read_text())) == [str(port)]
