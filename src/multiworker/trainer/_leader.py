"""Waiting for the coordination service's leader before MultiWorkerMirroredStrategy connects to it.

Creating MultiWorkerMirroredStrategy connects every task to the coordination service on the
leader (the chief, or worker 0 without one). A worker that gets there before the leader's server
listens is refused, and TensorFlow's gRPC channel tries again only after its reconnect back-off:
the strategy then took 0.84-1.22 s instead of 0.07 s whenever a worker finished importing
TensorFlow before the chief (4 of 9 hand-launched starts of the two-worker MNIST job, 1 of 6
launcher runs, where the chief starts first; BENCHMARKS.md).
A non-leader therefore first waits until the leader's address accepts a TCP connection, trying
every 10 ms. The leader's service is up before its port opens, so the strategy then connects at
once. The wait is bounded; past it TensorFlow's own retries take over, as before.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping

logger = logging.getLogger(__name__)

__all__ = ["leader_address", "split_address", "wait_for_leader"]

#: Longer than any start-up seen; past it the strategy is created anyway and TensorFlow retries.
TIMEOUT_SECONDS = 120.0
INTERVAL_SECONDS = 0.01


def leader_address(cluster: Mapping[str, list[str]]) -> str | None:
    """The coordination leader's ``host:port`` under MultiWorkerMirroredStrategy: chief 0, else
    worker 0 (TensorFlow's ``multi_worker_util.coordination_leader``); None in an empty cluster."""
    for job in ("chief", "worker"):
        if cluster.get(job):
            return cluster[job][0]
    return None


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``, with an optional ``grpc://``) as (host, port); ValueError
    when there is no port."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"{address!r} is not host:port")
    return host.strip("[]"), int(port)


def wait_for_leader(address: str, *, timeout: float = TIMEOUT_SECONDS,
                    interval: float = INTERVAL_SECONDS) -> float | None:
    """Wait until ``address`` accepts a TCP connection; the seconds waited, or None when it did
    not within ``timeout`` (or the address has no port), so the caller goes on as it would have."""
    try:
        host, port = split_address(address)
    except ValueError:
        return None
    start = time.monotonic()
    while True:
        try:
            socket.create_connection((host, port), timeout=max(interval, 0.5)).close()
            return time.monotonic() - start
        except OSError:  # refused, not resolvable yet (a pod's DNS name), unreachable
            if time.monotonic() - start >= timeout:
                logger.info("the coordination leader %s did not answer within %.0f s; connecting anyway",
                            address, timeout)
                return None
            time.sleep(interval)
