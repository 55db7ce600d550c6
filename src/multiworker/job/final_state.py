"""The driver's last word, kept where a full disk cannot stop it: a small file reserved when the
driver claims the job (``<job_dir>/final-state.json``, 4 KiB of spaces) and overwritten in place
when the job ends, which needs no new disk space. When the store could not take the final state,
whoever later finds the driver gone records this one instead of Lost."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

__all__ = ["NAME", "SIZE", "reserve", "write", "read"]

log = logging.getLogger(__name__)

NAME = "final-state.json"
SIZE = 4096


def reserve(path: Path) -> None:
    """Create the file at its full size (while there is space); keep one that exists."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        log.debug("cannot reserve %s: %s", path, exc)
        return
    try:
        os.write(fd, b" " * SIZE)
        os.fsync(fd)
    except OSError as exc:
        log.debug("cannot reserve %s: %s", path, exc)
    finally:
        os.close(fd)


def write(path: Path, state: str, message: str, finished_at: float) -> bool:
    """Overwrite the reserved file in place with the final state; False if that was not possible."""
    doc: dict[str, Any] = {"state": state, "finished_at": finished_at, "message": message}
    data = json.dumps(doc).encode()
    while len(data) > SIZE and doc["message"]:
        doc["message"] = doc["message"][: max(0, len(doc["message"]) - (len(data) - SIZE) - 8)]
        data = json.dumps(doc).encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    except OSError as exc:
        log.debug("no reserved final-state file %s: %s", path, exc)
        return False
    try:
        os.pwrite(fd, data.ljust(SIZE), 0)
        os.fsync(fd)
        return True
    except OSError as exc:
        log.debug("cannot write %s: %s", path, exc)
        return False
    finally:
        os.close(fd)


def read(path: Path) -> dict[str, Any] | None:
    """The final state the driver wrote (state, finished_at, message), or None."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(SIZE).strip() or b"null")
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("state"), str):
        return None
    return doc
