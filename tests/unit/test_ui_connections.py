"""The dashboard's server under slow and greedy clients (a real uvicorn server in a thread): a cap on
open connections, refused ones logged once; a read timeout for partial requests; a cap on live log
streams."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import warnings

import pytest

pytest.importorskip("uvicorn")
pytest.importorskip("starlette")

from test_monitor_views import record_job  # noqa: E402

from multiworker.job import Store  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from multiworker.ui import api  # noqa: E402
    from multiworker.ui.app import create_app  # noqa: E402
    from multiworker.ui.server import bind, server_config  # noqa: E402


@pytest.fixture
def served(mw_home):
    """(port, server) of a dashboard capped at 8 connections with a 2 s read timeout."""
    import uvicorn

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(server_config(create_app(mw_home), max_connections=8, read_timeout=2.0))
    server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    yield sock.getsockname()[1], server
    server.should_exit = True
    thread.join(30)
    sock.close()


def _get(port: int, path: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
        return _read_all(s)


def _read_all(s: socket.socket) -> bytes:
    out = b""
    while chunk := s.recv(65536):
        out += chunk
    return out


def test_connections_over_the_cap_are_refused_and_logged_once(served, caplog):
    port, _ = served
    caplog.set_level(logging.WARNING, logger="multiworker.ui.connections")
    slow = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(8)]
    for s in slow:
        s.sendall(b"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # headers never finished
    refused = []
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            refused.append(_read_all(s))
    assert all(r.startswith(b"HTTP/1.1 503") for r in refused), refused
    assert sum("refusing new ones" in r.message for r in caplog.records) == 1
    # the stalled clients are closed by the server once the read timeout passes
    for s in slow:
        assert _read_all(s) == b""
        s.close()
    assert _get(port, "/api/jobs").startswith(b"HTTP/1.1 200")


def test_a_partial_body_or_idle_connection_is_timed_out(served):
    port, _ = served
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"POST /api/jobs/x/cancel HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\nabc")
        _read_all(s)  # answered or not, the server closes the connection: the body never comes
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        assert _read_all(s) == b""  # connected, sent nothing


def test_live_log_streams_are_capped(served, mw_home, monkeypatch):
    port, _ = served
    monkeypatch.setattr(api, "MAX_STREAMS", 3)
    record_job(Store(mw_home), "feed0001", state="Running", pid=os.getpid())
    streams = []
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"GET /api/jobs/feed0001/logs/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = s.recv(65536)
        assert head.startswith(b"HTTP/1.1 200"), head
        streams.append(s)
    over = _get(port, "/api/jobs/feed0001/logs/stream")
    assert over.startswith(b"HTTP/1.1 503") and b"live log streams are open" in over
    for s in streams:
        s.close()
