"""The dashboard's HTTP connections, bounded: at most ``max_connections`` open at once (one more is
answered 503 and closed, and a full server is logged once, not per refusal), and a client must send
its whole request within ``read_timeout`` seconds of connecting or of its previous response, so slow
or stalled clients cannot hold the server's file descriptors. (uvicorn's h11 protocol, with these two
rules added; uvicorn itself has neither a cap on open connections nor a read timeout.)
"""

from __future__ import annotations

import logging
import resource

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["bounded_protocol", "connection_cap", "raise_open_file_limit"]

log = logging.getLogger(__name__)

_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nconnection: close\r\n"
            b"content-length: 49\r\n\r\nthe dashboard has too many open connections now\r\n")


def raise_open_file_limit() -> int:
    """Raise the soft open-file limit to the hard one (at most 65536); return the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = min(hard if hard != resource.RLIM_INFINITY else 65536, 65536)
    if wanted > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
            soft = wanted
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(open_file_limit: int, wanted: int = 256) -> int:
    """Connections to allow: ``wanted``, or a quarter of the open-file limit when that is lower
    (each live log stream also holds the store's files)."""
    return max(8, min(wanted, open_file_limit // 4))


def bounded_protocol(max_connections: int, read_timeout: float) -> type[H11Protocol]:
    """An H11Protocol class applying the two rules above, with its own count of refusals."""
    state = {"refused": 0}

    class BoundedH11Protocol(H11Protocol):
        _deadline = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            if len(self.connections) > max_connections:
                if state["refused"] == 0:
                    log.warning("%d connections are open, the most the dashboard takes: refusing new ones "
                                "until some close", max_connections)
                state["refused"] += 1
                transport.write(_REFUSAL)
                transport.close()
                return
            if state["refused"] and len(self.connections) < max_connections:
                log.warning("accepting connections again (%d refused meanwhile)", state["refused"])
                state["refused"] = 0
            self._arm()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(read_timeout, self._timed_out)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _timed_out(self) -> None:
            self._deadline = None
            if not self.transport.is_closing() and self.conn.their_state is not h11.DONE:
                log.debug("closing %s: no complete request within %.0f s", self.client, read_timeout)
                self.transport.close()

        def handle_events(self) -> None:
            super().handle_events()
            if self.conn.their_state is h11.DONE:
                self._disarm()  # the whole request is in: the response may take as long as it needs

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

    return BoundedH11Protocol
