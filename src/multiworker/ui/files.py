"""A job's output directory in the browser (model, checkpoints, logs, metrics.json): listings and
files, never anything outside that directory (``..`` and symlinks leading out are refused).

A job's files are the job's, not the dashboard's: they are served under a sandboxing
Content-Security-Policy, and any type a browser would run (HTML, SVG, XML, scripts) as plain text.
"""

from __future__ import annotations

import logging
import mimetypes
import stat
from pathlib import Path

from multiworker.errors import UserError

__all__ = ["resolve_inside", "listing", "served_type", "FILE_CSP"]

log = logging.getLogger(__name__)

FILE_CSP = "sandbox; default-src 'none'; img-src 'self' data:; style-src 'unsafe-inline'"
# Types a browser only displays; every other type is sent as text/plain.
_PASSIVE = {"text/plain", "text/csv", "application/json", "image/png", "image/jpeg", "image/gif",
            "image/webp", "application/pdf"}


def served_type(path: Path) -> str:
    """The Content-Type a job's file is served with: its own when passive, else plain text."""
    guessed, _ = mimetypes.guess_type(path.name)
    if guessed in _PASSIVE:
        return guessed + ("; charset=utf-8" if guessed.startswith("text/") or guessed.endswith("json") else "")
    return "text/plain; charset=utf-8"


def resolve_inside(root: Path, relative: str) -> Path:
    """``root/relative``, resolved; UserError when it leaves ``root`` or does not exist."""
    if "\0" in relative:
        raise UserError(f"{relative!r}: a path cannot contain a NUL character")
    base = root.resolve()
    target = (base / relative.lstrip("/")).resolve()
    if target != base and base not in target.parents:
        raise UserError(f"{relative!r} is outside the job's output directory")
    if not target.exists():
        raise UserError(f"{relative!r} does not exist in the job's output directory")
    if not (target.is_file() or target.is_dir()):
        raise UserError(f"{relative!r} is neither a file nor a directory (a FIFO, socket or device)")
    return target


def listing(root: Path, directory: Path) -> list[dict]:
    """The entries of ``directory`` (inside ``root``): directories first, then files, by name."""
    base = root.resolve()
    entries = []
    for child in directory.iterdir():
        try:
            info = child.stat()
        except OSError:
            continue
        is_dir = stat.S_ISDIR(info.st_mode)
        entries.append({
            "name": child.name + ("/" if is_dir else ""),
            "path": str(child.resolve().relative_to(base)) if _inside(child, base) else None,
            "dir": is_dir,
            "size": None if is_dir else info.st_size,
            "mtime": info.st_mtime,
        })
    return sorted(entries, key=lambda e: (not e["dir"], e["name"]))


def _inside(path: Path, base: Path) -> bool:
    resolved = path.resolve()
    return resolved == base or base in resolved.parents
