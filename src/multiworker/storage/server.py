"""The stand-in process: ``python -m multiworker.storage.server --dir DIR --mount gs://B=PATH ...``.

Serves the JSON API over plain HTTP (for clients that take an endpoint: google-cloud-storage, gcsfs)
and a CONNECT proxy that answers Google's storage hostnames with the same API over TLS (for
TensorFlow's GCS filesystem, whose URLs are fixed). All on 127.0.0.1, on ports the kernel picks; when listening, it
writes ``{"http": PORT, "proxy": PORT}`` to ``DIR/ready.json``. It ends on SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import ssl
import sys
from pathlib import Path

__all__ = ["main"]

log = logging.getLogger("multiworker.storage")


def _listen(host: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    sock.listen(128)
    sock.set_inheritable(False)
    return sock


async def _serve(directory: Path, mounts: list[str], host: str, access_log: bool = False) -> None:
    import uvicorn

    from multiworker.private_files import write_private_text
    from multiworker.storage.buckets import BucketMap, parse_mounts
    from multiworker.storage.gcs_api import make_app
    from multiworker.storage.proxy import serve_proxy
    from multiworker.storage.tls import HOSTS, make_certificates

    buckets = BucketMap(parse_mounts(mounts))
    app = make_app(buckets)
    cert, key, _bundle = make_certificates(directory)
    plain, proxy_sock = _listen(host), _listen(host)
    http_port = plain.getsockname()[1]
    # h11, whatever else is installed: it keeps the spelling of the header names the app gives
    # (``Location``, which TensorFlow looks up case-sensitively); httptools lowercases them.
    server = uvicorn.Server(uvicorn.Config(app, http="h11", log_level="info" if access_log else "warning",
                                           access_log=access_log, lifespan="off",
                                           timeout_keep_alive=60))
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign,assignment]  # ours below
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    intercepted = set(HOSTS)
    proxy = await serve_proxy(proxy_sock, lambda h, p: (host, http_port, tls) if h in intercepted and p == 443 else None)
    task = asyncio.create_task(server.serve(sockets=[plain]))
    while not server.started:
        if task.done():
            task.result()
            raise RuntimeError("the stand-in's HTTP server ended while starting")
        await asyncio.sleep(0.05)
    ready = {"http": http_port, "proxy": proxy_sock.getsockname()[1], "host": host,
             "buckets": buckets.buckets}
    write_private_text(directory / "ready.json.tmp", json.dumps(ready))
    os.replace(directory / "ready.json.tmp", directory / "ready.json")
    log.warning("serving %s on http://%s:%d (proxy %d)", ", ".join(mounts), host, ready["http"], ready["proxy"])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    proxy.close()
    server.should_exit = True
    await asyncio.gather(task, return_exceptions=True)
    app.state.discard_uploads()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m multiworker.storage.server", description=__doc__)
    parser.add_argument("--dir", required=True, type=Path, help="private directory: certificates, ready.json")
    parser.add_argument("--mount", action="append", default=[], help="gs://BUCKET[/PREFIX]=DIR (repeatable)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--access-log", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s storage: %(message)s", stream=sys.stderr)
    asyncio.run(_serve(args.dir, args.mount, args.host, args.access_log))
    return 0


if __name__ == "__main__":
    sys.exit(main())
