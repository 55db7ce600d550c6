"""Files only their owner may read (0600): a job's spec, its replica logs and the supervisor's log
can hold env values such as API keys, so they are never created readable by other users."""

from __future__ import annotations

import os
from pathlib import Path
from typing import BinaryIO

__all__ = ["open_private", "write_private_text"]

_MODE = 0o600


def open_private(path: Path | str) -> BinaryIO:
    """Open ``path`` for appending (unbuffered bytes), created 0600; an existing file is made 0600."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, _MODE)
    try:
        os.fchmod(fd, _MODE)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab", buffering=0)


def write_private_text(path: Path | str, text: str) -> None:
    """Replace ``path``'s content with ``text`` (UTF-8), the file created or made 0600 first."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, _MODE)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        os.fchmod(fd, _MODE)
        f.write(text)
