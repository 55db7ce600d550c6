"""Object names <-> files: ``gs://BUCKET[/PREFIX]`` mapped to local directories, as the stand-in serves them.

An object ``a/b.txt`` is the file ``DIR/a/b.txt``; a name ending in ``/`` (a "directory placeholder",
which TensorFlow writes for ``makedirs``) is the directory itself. Listing walks the files, so files
put in DIR by hand are objects too.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["Mount", "BucketMap", "ObjectInfo", "BadName", "parse_mounts"]


class BadName(ValueError):
    """An object name that cannot be a file (``..``, an empty segment, a NUL)."""


@dataclasses.dataclass(frozen=True)
class Mount:
    """``gs://bucket/prefix`` served from ``root`` (prefix "" or ending in ``/``)."""

    bucket: str
    prefix: str
    root: Path

    @classmethod
    def parse(cls, text: str) -> Mount:
        """``gs://bucket[/prefix]=DIR``."""
        cloud, _, local = text.partition("=")
        if not cloud.startswith("gs://") or not local:
            raise ValueError(f"{text!r} is not gs://BUCKET[/PREFIX]=DIR")
        bucket, _, prefix = cloud[len("gs://"):].partition("/")
        prefix = prefix.strip("/")
        return cls(bucket, prefix + "/" if prefix else "", Path(local).resolve())


def parse_mounts(items: Iterable[str]) -> list[Mount]:
    return [Mount.parse(item) for item in items]


@dataclasses.dataclass(frozen=True)
class ObjectInfo:
    name: str
    size: int
    mtime_ns: int
    is_dir: bool = False
    hashes: dict[str, str] | None = None  # crc32c and md5Hash (base64), where known


class _Hasher:
    """crc32c (google-crc32c, where installed) and md5 of a stream, in the JSON API's base64 form."""

    def __init__(self) -> None:
        try:
            import google_crc32c

            self.crc: Any = google_crc32c.Checksum()
        except ImportError:
            self.crc = None
        self.md5 = hashlib.md5(usedforsecurity=False)

    def update(self, data: bytes) -> None:
        self.md5.update(data)
        if self.crc is not None:
            self.crc.update(data)

    def result(self) -> dict[str, str]:
        out = {"md5Hash": base64.b64encode(self.md5.digest()).decode()}
        if self.crc is not None:
            out["crc32c"] = base64.b64encode(self.crc.digest()).decode()
        return out


# Objects up to this size get their checksums computed when asked for (google-cloud-storage checks them).
HASH_ON_READ_LIMIT = 64 << 20


class BucketMap:
    """The mapped buckets; the longest mapped prefix of a name decides its file."""

    def __init__(self, mounts: Iterable[Mount]):
        self.mounts = sorted(mounts, key=lambda m: (m.bucket, -len(m.prefix)))
        # Directories written as ``x/`` placeholders (TensorFlow's makedirs): listed as objects and kept
        # when emptied. Other directories exist only through what they hold, as a prefix in a bucket
        # does: not listed as objects, and removed when a delete empties them.
        self._markers: set[Path] = set()
        self._hashes: dict[tuple[Path, int, int], dict[str, str]] = {}  # (path, size, mtime_ns) -> checksums

    @property
    def buckets(self) -> list[str]:
        return sorted({m.bucket for m in self.mounts})

    def has_bucket(self, bucket: str) -> bool:
        return any(m.bucket == bucket for m in self.mounts)

    def path(self, bucket: str, name: str) -> Path | None:
        """The file (or, for ``x/``, the directory) of an object; None if no mount covers it."""
        _check(name)
        for m in self.mounts:
            if m.bucket == bucket and (name.startswith(m.prefix) or name + "/" == m.prefix):
                rest = name[len(m.prefix):] if name.startswith(m.prefix) else ""
                return m.root / rest if rest else m.root
        return None

    def stat(self, bucket: str, name: str, *, hashes: bool = False) -> ObjectInfo | None:
        """An object's size and time; ``hashes``: with its checksums (computed once for a file up to
        HASH_ON_READ_LIMIT, remembered for what was written here)."""
        path = self.path(bucket, name)
        if path is None:
            return None
        try:
            st = path.stat()
        except OSError:
            return None
        if path.is_dir():
            return ObjectInfo(name, 0, st.st_mtime_ns, True) if name.endswith("/") and self._is_marker(path) else None
        if name.endswith("/"):
            return None
        key = (path, st.st_size, st.st_mtime_ns)
        if hashes and key not in self._hashes and st.st_size <= HASH_ON_READ_LIMIT:
            hasher = _Hasher()
            try:
                with open(path, "rb") as f:
                    while chunk := f.read(1 << 20):
                        hasher.update(chunk)
            except OSError:
                return None
            self._hashes[key] = hasher.result()
        return ObjectInfo(name, st.st_size, st.st_mtime_ns, hashes=self._hashes.get(key) if hashes else None)

    def write(self, bucket: str, name: str, chunks: Iterable[bytes]) -> ObjectInfo:
        """Write an object atomically (a temporary file renamed over it); ``x/`` makes a directory."""
        path = self.path(bucket, name)
        if path is None:
            raise PermissionError(f"gs://{bucket}/{name} is outside every --map-path of bucket {bucket}")
        if name.endswith("/"):
            for _ in chunks:
                pass
            path.mkdir(parents=True, exist_ok=True)
            self._markers.add(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".upload", dir=path.parent)
            hasher = _Hasher()
            try:
                with os.fdopen(fd, "wb") as out:
                    for chunk in chunks:
                        out.write(chunk)
                        hasher.update(chunk)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
            st = path.stat()
            self._hashes[(path, st.st_size, st.st_mtime_ns)] = hasher.result()
        info = self.stat(bucket, name, hashes=True)
        if info is None:
            raise FileNotFoundError(f"gs://{bucket}/{name} was removed while it was written")
        return info

    def delete(self, bucket: str, name: str) -> bool:
        path = self.path(bucket, name)
        if path is None:
            return False
        roots = {m.root for m in self.mounts}
        try:
            if name.endswith("/"):
                if not self._is_marker(path) or path in roots:
                    return False
                self._markers.discard(path)
                here = path
            elif path.is_file():
                path.unlink()
                here = path.parent
            else:
                return False
        except FileNotFoundError:
            return False
        while here not in roots and here not in self._markers:
            try:
                here.rmdir()
            except OSError:  # objects remain in it
                break
            here = here.parent
        return True

    def _is_marker(self, path: Path) -> bool:
        """Whether a directory stands for a placeholder object: written as one, or empty."""
        if path in self._markers:
            return path.is_dir()
        try:
            return path.is_dir() and next(os.scandir(path), None) is None
        except OSError:
            return False

    def list(self, bucket: str, prefix: str = "", delimiter: str = "") -> tuple[list[ObjectInfo], list[str]]:
        """(objects, prefixes) as the JSON API's objects.list returns them, sorted by name.

        A directory is listed as its ``x/`` placeholder, or as a prefix with ``/`` as delimiter.
        """
        items: dict[str, ObjectInfo] = {}
        prefixes: set[str] = set()
        if prefix.endswith("/") and (marker := self.stat(bucket, prefix)) is not None:
            items[prefix] = marker  # a directory's own placeholder, as TensorFlow's makedirs leaves one
        shallow = delimiter == "/"
        for m in self.mounts:
            if m.bucket != bucket:
                continue
            if prefix.startswith(m.prefix):
                start = prefix[len(m.prefix):].rpartition("/")[0]
                base, root = m.prefix + (start + "/" if start else ""), m.root / start if start else m.root
            elif m.prefix.startswith(prefix):
                base, root = m.prefix, m.root
            else:
                continue
            for info in self._walk(root, base, recursive=not shallow):
                if not info.name.startswith(prefix) or info.name in items:
                    continue
                if self.path(bucket, info.name) != _path_of(m, info.name):
                    continue  # a longer mapped prefix covers it
                rest = info.name[len(prefix):]
                cut = rest.find(delimiter) if delimiter else -1
                if cut >= 0:
                    prefixes.add(prefix + rest[: cut + len(delimiter)])
                else:
                    items[info.name] = info
        return [items[k] for k in sorted(items)], sorted(prefixes)

    def _walk(self, root: Path, base: str, *, recursive: bool) -> Iterator[ObjectInfo]:
        """Objects under ``root`` named ``base`` + relative path: files, and directories: as ``x/``
        placeholders where they stand for one, all of them when not ``recursive`` (they become prefixes)."""
        try:
            entries = list(os.scandir(root))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if entry.name.startswith(".") and entry.name.endswith(".upload"):
                continue  # an upload in progress
            try:
                st = entry.stat()
            except OSError:
                continue
            if entry.is_dir():
                name = f"{base}{entry.name}/"
                if not recursive or self._is_marker(Path(entry.path)):
                    yield ObjectInfo(name, 0, st.st_mtime_ns, True)
                if recursive:
                    yield from self._walk(Path(entry.path), name, recursive=True)
            elif entry.is_file():
                yield ObjectInfo(f"{base}{entry.name}", st.st_size, st.st_mtime_ns)


def _path_of(m: Mount, name: str) -> Path:
    rest = name[len(m.prefix):]
    return m.root / rest if rest else m.root


def _check(name: str) -> None:
    parts = name.split("/")
    if name.endswith("/"):
        parts = parts[:-1]
    if "\0" in name or (name and any(p in ("", ".", "..") for p in parts)):
        raise BadName(f"object name {name!r} cannot be a file: it has an empty, '.' or '..' segment")
