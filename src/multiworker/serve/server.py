"""``multiworker serve``: load a SavedModel and serve it (REST with uvicorn, gRPC with grpc.aio, on one
event loop) until Ctrl-C or SIGTERM.

On either signal both stop accepting, finish the requests in flight, the batcher fails what is still
queued with 503, and ``serve`` returns 0. Connections are capped (``Limits.max_connections``; more
get 503) and a client that sends no request head within ``Limits.read_timeout`` is disconnected.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import socket
from collections.abc import Callable

from multiworker.errors import UserError
from multiworker.serve.batching import BatchOptions
from multiworker.serve.limits import Limits

__all__ = ["serve", "parse_duration_ms"]

log = logging.getLogger(__name__)


def parse_duration_ms(text: str) -> float:
    """``5ms``, ``500us``, ``0.01s`` or a bare number of milliseconds -> seconds."""
    units = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
    value = text.strip().lower()
    for suffix in ("us", "ms", "s"):
        if value.endswith(suffix):
            number, scale = value[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = value, 1e-3
    try:
        seconds = float(number) * scale
    except ValueError:
        raise UserError(f"--batch-timeout: {text!r} is not a duration; give e.g. 5ms, 500us or 0.01s") from None
    if seconds < 0:
        raise UserError(f"--batch-timeout: {text!r} is negative; give 0 or more, e.g. 5ms")
    return seconds


def _check_port(host: str, port: int, flag: str = "--port") -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise UserError(f"{flag}: {port} on {host} is not available ({exc.strerror}); pick another port") from None


def _http_protocol(read_timeout: float):
    """uvicorn's HTTP protocol (httptools when installed, else h11), closing a connection that sends no
    complete request head within ``read_timeout``.

    uvicorn itself times out only idle keep-alive connections, so a client that opens a connection
    and sends nothing (or a header a byte at a time) would hold it for ever.
    """
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as Base
    except ImportError:
        from uvicorn.protocols.http.h11_impl import H11Protocol as Base  # type: ignore[assignment]

    class Protocol(Base):
        _head_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def _arm(self) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            self._head_timer = self.loop.call_later(read_timeout, self._head_timeout)

        def _waiting_for_head(self) -> bool:
            return self.cycle is None or self.cycle.response_complete

        def _head_timeout(self) -> None:
            self._head_timer = None
            if self._waiting_for_head() and not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            cycle = self.cycle
            super().data_received(data)
            if self.cycle is not cycle and self._head_timer is not None:  # a request head arrived
                self._head_timer.cancel()
                self._head_timer = None

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self._waiting_for_head():
                self._arm()

        def connection_lost(self, exc) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
            super().connection_lost(exc)

    return Protocol


def _open_files(limits: Limits) -> None:
    """Raise the open-file limit to what the connection cap needs; past it accept() fails in a loop."""
    import resource

    needed = 2 * limits.max_connections + 256  # REST and gRPC connections, TensorFlow's files, the decoder
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
        if raised < needed:
            raise UserError(f"--max-connections: {limits.max_connections} connections need {needed} open files; "
                            f"this process may open {hard} (ulimit -n); give --max-connections "
                            f"{max(1, (hard - 256) // 2)} or less")


def _uvicorn_server(config, on_ready: Callable[[], None], grpc_address: tuple[str, int] | None):
    import uvicorn

    class Server(uvicorn.Server):
        """Starts gRPC beside REST and announces readiness; a signal ends serve() normally instead of re-raising."""

        grpc = None

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started and grpc_address is not None:
                from multiworker.serve.grpc_api import start_grpc

                try:
                    self.grpc = await start_grpc(config.app.state.server, *grpc_address)
                except UserError as exc:
                    self.grpc_error = exc
                    self.should_exit = True
                    return
            if self.started:
                on_ready()

        async def shutdown(self, sockets=None) -> None:
            if self.grpc is not None:
                await self.grpc.stop(5)  # in-flight calls finish while the batcher still runs
            await super().shutdown(sockets)

        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            log.info("signal %d: stopping", sig)
            getattr(self, "_captured_signals", []).clear()

    return Server(config)


def serve(target: str, *, host: str = "127.0.0.1", port: int = 8501, grpc_port: int | None = 8500,
          name: str | None = None, options: BatchOptions | None = None, limits: Limits | None = None,
          store=None, on_ready: Callable[[str, object], None] | None = None) -> int:
    """Serve the SavedModel of ``target`` (a job reference or a directory) in the foreground.

    REST on ``port``, TF Serving's gRPC API on ``grpc_port`` (None: no gRPC).
    ``on_ready(url, servable)`` runs once both listen. Returns 0 after a clean stop.
    """
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise UserError("serving needs Starlette and uvicorn: `pip install 'multiworker[serve]'`") from exc
    from multiworker.serve.app import create_app
    from multiworker.serve.model import load, locate

    limits = limits or Limits()
    base, default_name = locate(target, store)
    name = name or default_name
    if not name or "/" in name or ":" in name:
        raise UserError(f"--name: {name!r} cannot be a model name in a URL; give letters, digits, '-', '_' or '.'")
    if grpc_port is not None and grpc_port == port:
        raise UserError(f"--grpc-port: {grpc_port} is also the REST --port; give another (TF Serving uses 8500)")
    _check_port(host, port)
    if grpc_port is not None:
        from multiworker.serve.grpc_api import _modules

        _modules()  # the install hint now, not after loading the model
        _check_port(host, grpc_port, "--grpc-port")
    _open_files(limits)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    servable = load(base)
    app = create_app(servable, name=name, options=options or BatchOptions(), limits=limits,
                     deployed_model_id=os.environ.get("AIP_DEPLOYED_MODEL_ID"))
    # TensorFlow and the model are millions of objects that live as long as the server: out of the
    # garbage collector's sight, a full collection (which JSON requests trigger) no longer walks them
    gc.collect()
    gc.freeze()
    shown = "localhost" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown}:{port}/v1/models/{name}"
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=10, loop="asyncio", http=_http_protocol(limits.read_timeout),
                            limit_concurrency=limits.max_connections, timeout_keep_alive=5)
    server = _uvicorn_server(config, lambda: on_ready and on_ready(url, servable),
                             None if grpc_port is None else (host, grpc_port))
    server.run()
    if getattr(server, "grpc_error", None):
        raise server.grpc_error
    if not server.started:
        raise UserError(f"--port: the server could not listen on {host}:{port}; see the messages above")
    return 0
