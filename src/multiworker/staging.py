"""The temporary siblings an atomic write goes through (``<target>.tmp-<pid>-<hex>``, and
``.old-`` for the tree being replaced), and removing the ones a killed writer left behind: a save
interrupted by SIGKILL must not leave a model-sized directory forever."""

from __future__ import annotations

import logging
import os
import re
import shutil
import uuid
from pathlib import Path

__all__ = ["temp_sibling", "done", "is_staged", "remove_stale_siblings", "sweep"]

log = logging.getLogger(__name__)

_TAGS = ("tmp", "old")
_STAGED = re.compile(r"^(?P<base>.+)\.(?:tmp|old)-(?P<pid>\d+)-[0-9a-f]{8}$")
_in_progress: set[str] = set()  # this process's own siblings, while it writes them


def temp_sibling(path: str, tag: str) -> str:
    """A fresh name next to ``path`` (same filesystem, so a rename is atomic)."""
    if tag not in _TAGS:
        raise ValueError(f"tag {tag!r} is not one of {_TAGS}")
    path = path.rstrip("/")
    name = f"{path}.{tag}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _in_progress.add(name)
    return name


def done(name: str) -> None:
    """``name`` (from :func:`temp_sibling`) is gone or published."""
    _in_progress.discard(name)


def is_staged(name: str) -> bool:
    """Whether ``name`` is a temporary sibling's name."""
    return _STAGED.match(name) is not None


def _writer_alive(pid: int) -> bool:
    if pid == os.getpid():
        return False  # this process: its own writes in progress are in _in_progress
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # another user's process: alive
    return True


def _remove(path: Path) -> bool:
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
    except OSError as exc:
        log.warning("could not remove the leftover %s: %s", path, exc)
        return False
    log.info("removed %s, left by a write that never finished", path)
    return True


def remove_stale_siblings(target: str) -> list[str]:
    """Remove ``target``'s temporary siblings whose writer is gone; return their paths."""
    path = Path(target.rstrip("/"))
    try:
        candidates = list(path.parent.glob(f"{_glob_escape(path.name)}.*-*-*"))
    except OSError:
        return []
    out = []
    for child in candidates:
        match = _STAGED.match(child.name)
        if not match or match["base"] != path.name or str(child) in _in_progress:
            continue
        if not _writer_alive(int(match["pid"])) and _remove(child):
            out.append(str(child))
    return out


def sweep(root: Path, depth: int = 3) -> list[str]:
    """Remove every temporary sibling under ``root`` (``depth`` levels down): only for a directory no
    process writes into any more (a job that has ended)."""
    out: list[str] = []
    if depth < 0 or not root.is_dir() or root.is_symlink():
        return out
    try:
        children = list(root.iterdir())
    except OSError:
        return out
    for child in children:
        if _STAGED.match(child.name):
            if _remove(child):
                out.append(str(child))
        elif child.is_dir() and not child.is_symlink():
            out += sweep(child, depth - 1)
    return out


def _glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)
