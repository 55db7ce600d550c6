"""What one server lets its clients use: request size, connections, and how long a slow client may take."""

from __future__ import annotations

import re
from dataclasses import dataclass

from multiworker.errors import UserError

__all__ = ["Limits", "parse_size"]


@dataclass(frozen=True)
class Limits:
    max_request_bytes: int = 64 << 20  # a REST body or a gRPC message; larger ones get 413 / RESOURCE_EXHAUSTED
    max_connections: int = 500  # open HTTP connections (and in-flight gRPC calls); more get 503
    read_timeout: float = 30.0  # seconds a client may take to send a request's headers, and again its body


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_size(text: str, flag: str = "--max-request-size") -> int:
    """``64MB``, ``512k``, ``1GiB`` or a bare number of bytes -> bytes (binary units)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = match[2].lower() if match else ""
    if not match or unit not in _UNITS:
        raise UserError(f"{flag}: {text!r} is not a size; give e.g. 64MB, 512KB or 1GB")
    size = int(float(match[1]) * _UNITS[unit])
    if size < 1024:
        raise UserError(f"{flag}: {text!r} is under 1KB; no request fits")
    return size
