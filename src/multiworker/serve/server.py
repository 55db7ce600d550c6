"""``multiworker serve``: load a SavedModel and serve it with uvicorn until Ctrl-C or SIGTERM.

On either signal uvicorn stops accepting, finishes the requests in flight, the batcher fails what
is still queued with 503, and ``serve`` returns 0.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable

from multiworker.errors import UserError
from multiworker.serve.batching import BatchOptions

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


def _check_port(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise UserError(f"--port: {port} on {host} is not available ({exc.strerror}); pick another port") from None


def _uvicorn_server(config, on_ready: Callable[[], None]):
    import uvicorn

    class Server(uvicorn.Server):
        """Announces readiness once listening; a signal ends serve() normally instead of being re-raised."""

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            if self.started:
                on_ready()

        def handle_exit(self, sig, frame) -> None:
            super().handle_exit(sig, frame)
            log.info("signal %d: stopping", sig)
            getattr(self, "_captured_signals", []).clear()

    return Server(config)


def serve(target: str, *, host: str = "127.0.0.1", port: int = 8501, name: str | None = None,
          options: BatchOptions | None = None, store=None,
          on_ready: Callable[[str, object], None] | None = None) -> int:
    """Serve the SavedModel of ``target`` (a job reference or a directory) in the foreground.

    ``on_ready(url, servable)`` runs once the socket listens. Returns 0 after a clean stop.
    """
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        raise UserError("serving needs Starlette and uvicorn: `pip install 'multiworker[serve]'`") from exc
    from multiworker.serve.app import create_app
    from multiworker.serve.model import load, locate

    base, default_name = locate(target, store)
    name = name or default_name
    if not name or "/" in name or ":" in name:
        raise UserError(f"--name: {name!r} cannot be a model name in a URL; give letters, digits, '-', '_' or '.'")
    _check_port(host, port)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    servable = load(base)
    app = create_app(servable, name=name, options=options or BatchOptions(),
                     deployed_model_id=os.environ.get("AIP_DEPLOYED_MODEL_ID"))
    shown = "localhost" if host in ("0.0.0.0", "::") else host
    url = f"http://{shown}:{port}/v1/models/{name}"
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            lifespan="on", timeout_graceful_shutdown=10)
    server = _uvicorn_server(config, lambda: on_ready and on_ready(url, servable))
    server.run()
    if not server.started:
        raise UserError(f"--port: the server could not listen on {host}:{port}; see the messages above")
    return 0
