"""Writing a command's output file (``-o``): atomically, and with one-line errors for a bad path."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from multiworker.errors import UserError

__all__ = ["write_output"]


def write_output(path: Path | str, text: str, *, flag: str = "-o") -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename, so a failure leaves the old file whole."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{flag} {path}: is a directory; give a file name inside it, e.g. {path / 'out.yaml'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"{flag} {path}: directory {parent} does not exist; create it or choose another path")
    try:
        fd, tmp = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot write in {parent} ({exc.strerror}); choose another path") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise UserError(f"{flag} {path}: cannot write it ({exc.strerror}); choose another path") from None
