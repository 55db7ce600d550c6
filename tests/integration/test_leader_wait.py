"""A worker that creates MultiWorkerMirroredStrategy before the chief listens (real TensorFlow
processes over localhost, TF_CONFIG set by hand): it waits for the chief's port instead of
being refused and retrying after gRPC's 1 s reconnect back-off (multiworker.trainer._leader)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import two_workers

pytestmark = pytest.mark.integration

WORKER = Path(__file__).with_name("_leader_worker.py")


def test_the_chief_finds_its_peer_connected_at_once_when_the_peer_started_first(tmp_path):
    chief, peer = two_workers(WORKER, env={"LEADER_TEST_MARKER": str(tmp_path / "peer-started")})
    assert chief["replicas"] == peer["replicas"] == 2
    assert peer["strategy_seconds"] >= 0.2  # it did start first, and waited for the chief
    # Refused and retried after gRPC's back-off, the peer connected 0.6-1.0 s after the chief began.
    assert chief["strategy_seconds"] < 0.4, chief
