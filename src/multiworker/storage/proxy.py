"""An HTTPS (CONNECT) proxy: a tunnel to one of Google's storage hosts is answered here (TLS with the
stand-in's certificate, the requests passed on to its HTTP port); every other tunnel goes where it
asked, so the replicas' other HTTPS traffic is as it would be without the stand-in.

TensorFlow's libcurl sends ``Transfer-Encoding: identity`` beside ``Content-Length`` on uploads, which
HTTP/1.1 servers (h11) refuse; that header is dropped on the way, and ``X-Forwarded-Proto: https`` added
(the server builds upload URLs from it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import ssl
from collections.abc import Callable

__all__ = ["serve_proxy"]

log = logging.getLogger(__name__)

_MAX_HEAD = 16 << 10


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


_IDENTITY = re.compile(rb"\r\ntransfer-encoding:[ \t]*identity[ \t]*(?=\r\n)", re.IGNORECASE)
_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding:[^\r]*chunked", re.IGNORECASE)


async def _pipe_requests(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Requests from a client to the server, each head without ``Transfer-Encoding: identity``
    (a chunked body ends the filtering: the rest is passed as it comes)."""
    try:
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError as exc:
                writer.write(exc.partial)
                break
            head = head.replace(b"\r\n", b"\r\nX-Forwarded-Proto: https\r\n", 1)  # for Location URLs
            if _CHUNKED.search(head):
                writer.write(head)
                await _pipe(reader, writer)
                return
            writer.write(_IDENTITY.sub(b"", head))
            match = _LENGTH.search(head)
            left = int(match[1]) if match else 0
            while left:
                data = await reader.read(min(left, 1 << 16))
                if not data:
                    break
                writer.write(data)
                left -= len(data)
            await writer.drain()
    except (ConnectionError, asyncio.LimitOverrunError, ssl.SSLError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            writer.close()


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  route: Callable[[str, int], tuple[str, int, ssl.SSLContext] | None]) -> None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        writer.close()
        return
    line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    if len(line) != 3 or line[0] != "CONNECT":
        writer.write(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.close()
        return
    host, _, port_text = line[1].rpartition(":")
    host = host.strip("[]")
    answer = route(host, int(port_text)) if port_text.isdigit() else None
    target = answer[:2] if answer else (host, int(port_text)) if port_text.isdigit() else None
    try:
        if target is None:
            raise OSError(f"bad CONNECT target {line[1]!r}")
        up_reader, up_writer = await asyncio.open_connection(*target)
    except OSError as exc:
        log.info("proxy: cannot reach %s: %s", line[1], exc)
        writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()
        return
    writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
    await writer.drain()
    if answer is None:
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        return
    try:
        await writer.start_tls(answer[2])
    except (ssl.SSLError, ConnectionError, OSError) as exc:
        log.info("proxy: TLS with the client for %s failed: %s", line[1], exc)
        up_writer.close()
        writer.close()
        return
    await asyncio.gather(_pipe_requests(reader, up_writer), _pipe(up_reader, writer))


async def serve_proxy(sock, route: Callable[[str, int], tuple[str, int, ssl.SSLContext] | None]) -> asyncio.Server:
    """Serve CONNECT on the bound, listening socket ``sock``. ``route(host, port)``: None to tunnel to
    host:port itself, or (HOST, PORT, TLS context) to answer with that context and pass the requests to
    plain HTTP at HOST:PORT."""
    return await asyncio.start_server(lambda r, w: _handle(r, w, route), sock=sock, limit=_MAX_HEAD)
