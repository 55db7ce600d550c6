"""Small file helpers that work on local paths atomically and on gs:// (or other URLs) via tf.io.gfile.

Object stores have no atomic rename, so remote writes go straight to their target; local
writes go to a temporary sibling first and are renamed into place.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from typing import Any

from multiworker import staging

logger = logging.getLogger(__name__)


def is_remote(path: str) -> bool:
    """True for URLs such as gs://bucket/dir, which need tf.io.gfile."""
    return "://" in path


def join(base: str, *parts: str) -> str:
    """os.path.join for local paths; "/"-joined for URLs."""
    if is_remote(base):
        return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])
    return os.path.join(base, *parts)


def tensorboard_available() -> bool:
    """tf.summary needs the tensorboard package, which TensorFlow 2.21 no longer pulls in."""
    import importlib.util

    return importlib.util.find_spec("tensorboard") is not None


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def exists(path: str) -> bool:
    return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def makedirs(path: str) -> None:
    if is_remote(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def read_text(path: str) -> str | None:
    """The file's text, or None when it does not exist."""
    if is_remote(path):
        gfile = _gfile()
        if not gfile.exists(path):
            return None
        with gfile.GFile(path, "r") as f:
            return f.read()
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def write_text_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` so that readers see the old or the new file, never a partial one."""
    parent = os.path.dirname(path)
    if is_remote(path):
        _gfile().makedirs(parent)
        with _gfile().GFile(path, "w") as f:
            f.write(text)
        return
    os.makedirs(parent or ".", exist_ok=True)
    staging.remove_stale_siblings(path)
    tmp = staging.temp_sibling(path, "tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
        staging.done(tmp)


def write_json_atomic(path: str, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")


def remove(path: str) -> None:
    """Remove a file or directory tree if it exists."""
    if is_remote(path):
        gfile = _gfile()
        if gfile.exists(path):
            if gfile.isdir(path):
                gfile.rmtree(path)
            else:
                gfile.remove(path)
    elif os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.unlink(path)


temp_sibling = staging.temp_sibling


_RENAME_EXCHANGE = 2  # linux/fs.h


def _exchange(a: str, b: str) -> bool:
    """Swap two paths in one atomic step (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    if renameat2(at_fdcwd, a.encode(), at_fdcwd, b.encode(), _RENAME_EXCHANGE) == 0:
        return True
    return False


def publish_dir(tmp: str, target: str) -> None:
    """Move the finished directory ``tmp`` to ``target``, replacing what was there.

    ``target`` is never missing nor half-written: it is the old tree until one atomic exchange
    (renameat2) makes it the new one, and a reader polling it always finds a complete model. Where
    the exchange is not supported, the old tree is renamed aside first (a brief window without it).
    """
    try:
        os.replace(tmp, target)  # works when target is absent or an empty directory
        return
    except OSError:
        if not os.path.isdir(target):
            raise
    if _exchange(tmp, target):  # tmp now holds the old tree
        shutil.rmtree(tmp, ignore_errors=True)
        return
    old = temp_sibling(target, "old")
    os.rename(target, old)
    try:
        os.rename(tmp, target)
    except OSError:
        os.rename(old, target)
        raise
    finally:
        staging.done(old)
    shutil.rmtree(old, ignore_errors=True)
