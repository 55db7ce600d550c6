"""Request bodies -> JSON values and input arrays, without stalling the event loop.

Small bodies (most requests) are decoded in place by orjson (about 30x faster than ``json`` on
number arrays). A large body is spooled to a temporary file as it arrives and decoded and turned into
arrays in a separate process: both steps hold the GIL for the whole body, so a thread would stall
every other request as long. The worker returns plain arrays (a memory copy to unpickle) and gives
its memory back to the OS afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import gc
import json
import logging
import multiprocessing
import os
import tempfile
import threading
from concurrent.futures import ProcessPoolExecutor
from typing import Any, BinaryIO

from multiworker.serve import codec
from multiworker.serve.signatures import DEFAULT_SIGNATURE, BadRequest, NotFound, ServeError, SignatureInfo

__all__ = ["loads", "parse_predict_body", "Decoder", "SpooledBody", "release_memory", "LARGE_BODY"]

log = logging.getLogger(__name__)

LARGE_BODY = 1 << 20  # bytes; bodies above this are decoded in the worker process

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson comes with the serve extra
    _orjson = None


def loads(raw: bytes) -> Any:
    """The JSON value of ``raw``; BadRequest for anything that is not JSON (or nests too deep).

    NaN and Infinity (which TF Serving's REST API accepts but orjson does not) fall back to ``json``.
    """
    if _orjson is not None:
        try:
            return _orjson.loads(raw)
        except _orjson.JSONDecodeError as exc:
            special = b"NaN" in raw or b"Infinity" in raw or "infinity when parsed" in str(exc)
            if not special:
                raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    try:
        return json.loads(raw)
    except RecursionError:
        raise BadRequest("the request body nests arrays or objects too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, integers over 4300 digits
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None


def parse_predict_body(raw: bytes, signatures: dict[str, SignatureInfo], vertex: bool = False):
    """(signature name, input arrays, "row"/"column") of a :predict body, or the ServeError it deserves.

    ``vertex``: a Vertex AI body, ``{"instances": [...], "parameters": {...}}``, for the default signature.
    """
    body = loads(raw)
    if vertex:
        if not isinstance(body, dict) or "instances" not in body:
            raise BadRequest("a Vertex AI prediction request is {\"instances\": [...], \"parameters\": {...}}")
        body = {"instances": body["instances"]}
    name = signature_name(body)
    if name not in signatures:
        raise NotFound(f"Serving signature name: \"{name}\" not found in signature def; "
                       f"the model has {sorted(signatures)}")
    inputs, fmt = codec.parse_predict(body, signatures[name])
    return name, inputs, fmt


def signature_name(body: Any) -> str:
    """The request's ``signature_name`` (default ``serving_default``); BadRequest unless it is a string."""
    name = body.get("signature_name") if isinstance(body, dict) else None
    if name is not None and not isinstance(name, str):
        raise BadRequest(f"\"signature_name\" must be a string, not {type(name).__name__}")
    return name or DEFAULT_SIGNATURE


class SpooledBody:
    """A large request body in a temporary file, written chunk by chunk as it arrives (no joined copy)."""

    def __init__(self):
        fd, self.path = tempfile.mkstemp(prefix="multiworker-serve-body-")
        self._file: BinaryIO | None = os.fdopen(fd, "wb")
        self.size = 0

    def write(self, chunk: bytes) -> None:
        assert self._file is not None
        self._file.write(chunk)
        self.size += len(chunk)

    def finish(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def read(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read()

    def close(self) -> None:
        self.finish()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)

    def __len__(self) -> int:
        return self.size


def _worker_decode(path: str, signatures: dict[str, SignatureInfo], vertex: bool):
    try:
        with open(path, "rb") as f:
            raw = f.read()
        return parse_predict_body(raw, signatures, vertex)
    except ServeError as exc:
        return exc
    finally:
        raw = b""
        gc.collect()
        release_memory()


_libc = None


def release_memory() -> None:
    """Hand freed heap pages back to the OS (glibc keeps them after a large request otherwise)."""
    global _libc
    if _libc is None:
        path = ctypes.util.find_library("c")
        _libc = ctypes.CDLL(path) if path else False
    trim = getattr(_libc, "malloc_trim", None) if _libc else None
    if trim is not None:
        trim(0)


class Decoder:
    """Decodes :predict bodies: small ones inline, large ones in one worker process (started on first use)."""

    def __init__(self, signatures: dict[str, SignatureInfo], large: int = LARGE_BODY):
        self.signatures, self.large = signatures, large
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._trim_pending = False

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                # spawn: a fork of a process running TensorFlow's threads is not safe
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
            return self._pool

    async def predict(self, raw: bytes | SpooledBody, vertex: bool = False):
        if isinstance(raw, bytes):
            return parse_predict_body(raw, self.signatures, vertex)
        loop = asyncio.get_running_loop()
        result = await loop.run_in_executor(self._executor(), _worker_decode, raw.path, self.signatures, vertex)
        if isinstance(result, ServeError):
            raise result
        return result

    async def json(self, raw: bytes | SpooledBody) -> Any:
        """Any other body (classify, regress): parsed on a thread when large, so small requests interleave."""
        if isinstance(raw, bytes):
            return loads(raw)
        return await asyncio.to_thread(lambda: loads(raw.read()))

    def after_large_request(self) -> None:
        """Give the memory of a large request back, once (on a thread: trimming a big heap takes a while)."""
        if self._trim_pending:
            return
        self._trim_pending = True

        def trim() -> None:  # no gc.collect() here: walking TensorFlow's objects would hold the GIL
            self._trim_pending = False
            release_memory()

        threading.Thread(target=trim, name="serve-trim", daemon=True).start()

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
