"""A job's output directory in the browser (model, checkpoints, logs, metrics.json): listings and
files, never anything outside that directory (``..`` and symlinks leading out are refused)."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

from multiworker.errors import UserError

__all__ = ["resolve_inside", "listing"]

log = logging.getLogger(__name__)


def resolve_inside(root: Path, relative: str) -> Path:
    """``root/relative``, resolved; UserError when it leaves ``root`` or does not exist."""
    base = root.resolve()
    target = (base / relative.lstrip("/")).resolve()
    if target != base and base not in target.parents:
        raise UserError(f"{relative!r} is outside the job's output directory")
    if not target.exists():
        raise UserError(f"{relative!r} does not exist in the job's output directory")
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
