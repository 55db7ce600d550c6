"""``multiworker ui``: serve the dashboard with uvicorn until Ctrl-C or SIGTERM, then exit 0.

The socket is bound here (so ``--port 0`` can print the port it got, and a taken port is a one-line
error) and handed to uvicorn already listening: a browser opened at once just waits in the backlog.
Connections are capped and slow clients timed out (:mod:`multiworker.ui.connections`).
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
import webbrowser
from collections.abc import Callable
from pathlib import Path

from multiworker.errors import UserError
from multiworker.ui.security import TOKEN_QUERY, is_loopback, new_token

__all__ = ["DEFAULT_PORT", "READ_TIMEOUT", "bind", "serve", "server_config", "url_for"]

log = logging.getLogger(__name__)

DEFAULT_PORT = 8265
READ_TIMEOUT = 10.0  # seconds a client has to send a whole request


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: any free one)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise UserError(f"--host {host}: not an address of this machine ({exc.strerror}); "
                        "use 127.0.0.1, or 0.0.0.0 for every interface") from None
    family, _, _, _, address = infos[0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise UserError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror}); pick another port, "
                        "or --port 0 for any free one") from None
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_for(host: str, port: int, token: str | None) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "") else "[::1]" if host == "::" else (
        f"[{host}]" if ":" in host else host)
    return f"http://{shown}:{port}/" + (f"?{TOKEN_QUERY}={token}" if token else "")


def server_config(app, *, max_connections: int | None = None, read_timeout: float = READ_TIMEOUT):
    """The uvicorn config the dashboard runs with: capped connections, timed-out slow clients."""
    import uvicorn

    from multiworker.ui.connections import bounded_protocol, connection_cap, raise_open_file_limit

    if max_connections is None:
        max_connections = connection_cap(raise_open_file_limit())
    return uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=3,
                          lifespan="on", server_header=False, http=bounded_protocol(max_connections, read_timeout),
                          timeout_keep_alive=min(5, int(read_timeout)) or 1)


def serve(home: Path | None = None, *, host: str = "127.0.0.1", port: int = DEFAULT_PORT,
          open_browser: bool = False, on_ready: Callable[[str, bool], None] | None = None) -> int:
    """Serve until interrupted; ``on_ready(url, remote)`` once the socket listens. Returns 0."""
    import uvicorn

    from multiworker.ui.app import create_app

    remote = not is_loopback(host)
    token = new_token()
    sock = bind(host, port)
    url = url_for(host, sock.getsockname()[1], token if remote else None)
    server: uvicorn.Server | None = None
    app = create_app(home, token=token, remote=remote, tensorboard_host=host if not remote else "127.0.0.1",
                     stopping=lambda: server is not None and server.should_exit)
    server = uvicorn.Server(server_config(app))
    if on_ready is not None:
        on_ready(url, remote)
    if open_browser:
        with contextlib.suppress(Exception):  # no browser here: the printed URL is enough
            webbrowser.open(url)
    # uvicorn re-raises the signal that stopped it once it has shut down; answer that with nothing.
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    log.info("dashboard stopped")
    return 0
