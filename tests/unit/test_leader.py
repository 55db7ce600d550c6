"""Waiting for the coordination leader's server before MultiWorkerMirroredStrategy connects
(multiworker.trainer._leader), over real sockets on localhost."""

from __future__ import annotations

import json
import socket
import time

import pytest

from multiworker.trainer import _leader, _strategy, context


@pytest.mark.parametrize("cluster, leader", [
    ({"chief": ["c:1"], "worker": ["w0:2", "w1:3"]}, "c:1"),
    ({"worker": ["w0:2", "w1:3"], "evaluator": ["e:4"]}, "w0:2"),
    ({}, None),
])
def test_the_leader_is_chief_0_else_worker_0(cluster, leader):
    assert _leader.leader_address(cluster) == leader


@pytest.mark.parametrize("address, parts", [
    ("127.0.0.1:2222", ("127.0.0.1", 2222)),
    ("mnist-worker-0.mnist:2222", ("mnist-worker-0.mnist", 2222)),
    ("[::1]:2222", ("::1", 2222)),
    ("grpc://10.0.0.1:8470", ("10.0.0.1", 8470)),
])
def test_addresses_split_into_host_and_port(address, parts):
    assert _leader.split_address(address) == parts


@pytest.mark.parametrize("address", ["nohost", ":2222", "host:", "host:port"])
def test_an_address_without_a_port_is_refused(address):
    with pytest.raises(ValueError, match="not host:port"):
        _leader.split_address(address)
    assert _leader.wait_for_leader(address, timeout=0.1) is None  # goes on as TensorFlow would


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_waits_until_the_leader_listens_then_returns_at_once(monkeypatch):
    """Tries every 10 ms (not gRPC's 1 s back-off) until the leader listens: counted, not timed."""
    from types import SimpleNamespace

    port = _free_port()
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 5:  # the leader comes up after the fifth try
            server.bind(("127.0.0.1", port))
            server.listen()

    monkeypatch.setattr(_leader, "time", SimpleNamespace(monotonic=time.monotonic, sleep=sleep))
    try:
        assert _leader.wait_for_leader(f"127.0.0.1:{port}", timeout=60) is not None
        assert sleeps == [_leader.INTERVAL_SECONDS] * 5  # the sixth try connected
        assert _leader.wait_for_leader(f"127.0.0.1:{port}", timeout=60) is not None
        assert len(sleeps) == 5  # already up: no wait at all
    finally:
        server.close()


def test_a_leader_that_never_listens_is_given_up_after_the_timeout():
    start = time.monotonic()
    assert _leader.wait_for_leader(f"127.0.0.1:{_free_port()}", timeout=0.3) is None
    assert 0.3 <= time.monotonic() - start < 30  # given up, not waited on


def test_only_non_leaders_wait(monkeypatch, tmp_path):
    waited_for = []
    monkeypatch.setattr(_strategy, "wait_for_leader", lambda address: waited_for.append(address) or 0.0)
    cluster = {"worker": ["127.0.0.1:1111", "127.0.0.1:2222"]}
    for index in (0, 1):
        env = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
               "MULTIWORKER_OUTPUT_DIR": str(tmp_path)}
        _strategy._wait_for_leader(context(env))
    assert waited_for == ["127.0.0.1:1111"]  # worker 1 waited for worker 0; worker 0 for no one
