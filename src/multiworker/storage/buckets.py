"""Object names <-> files: ``gs://BUCKET[/PREFIX]`` mapped to local directories, as the stand-in serves them.

An object ``a/b.txt`` is the file ``DIR/a/b.txt``; a name ending in ``/`` (a "directory placeholder",
which TensorFlow writes for ``makedirs``) is the directory itself. Listing walks the files, so files
put in DIR by hand are objects too.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

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


class BucketMap:
    """The mapped buckets; the longest mapped prefix of a name decides its file."""

    def __init__(self, mounts: Iterable[Mount]):
        self.mounts = sorted(mounts, key=lambda m: (m.bucket, -len(m.prefix)))
        # Directories whose placeholder was deleted while objects remained in them: removed once empty,
        # as the prefix vanishes from a bucket once its placeholder and its last object are gone.
        self._doomed: set[Path] = set()

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

    def stat(self, bucket: str, name: str) -> ObjectInfo | None:
        path = self.path(bucket, name)
        if path is None:
            return None
        try:
            st = path.stat()
        except OSError:
            return None
        if path.is_dir():
            return ObjectInfo(name, 0, st.st_mtime_ns, True) if name.endswith("/") or not name else None
        return ObjectInfo(name, st.st_size, st.st_mtime_ns) if not name.endswith("/") else None

    def write(self, bucket: str, name: str, chunks: Iterable[bytes]) -> ObjectInfo:
        """Write an object atomically (a temporary file renamed over it); ``x/`` makes a directory."""
        path = self.path(bucket, name)
        if path is None:
            raise PermissionError(f"gs://{bucket}/{name} is outside every --map-path of bucket {bucket}")
        self._doomed.difference_update([path, *path.parents])
        if name.endswith("/"):
            for _ in chunks:
                pass
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".upload", dir=path.parent)
            try:
                with os.fdopen(fd, "wb") as out:
                    for chunk in chunks:
                        out.write(chunk)
                os.replace(tmp, path)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        info = self.stat(bucket, name)
        assert info is not None
        return info

    def delete(self, bucket: str, name: str) -> bool:
        path = self.path(bucket, name)
        if path is None:
            return False
        roots = {m.root for m in self.mounts}
        try:
            if name.endswith("/"):
                if not path.is_dir() or path in roots:
                    return False
                self._doomed.add(path)
            elif path.is_file():
                path.unlink()
            else:
                return False
        except FileNotFoundError:
            return False
        here = path if name.endswith("/") else path.parent
        while here in self._doomed and here not in roots:
            try:
                here.rmdir()
            except OSError:  # objects remain in it
                break
            self._doomed.discard(here)
            here = here.parent
        return True

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
            for info in _walk(root, base, recursive=not shallow):
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


def _path_of(m: Mount, name: str) -> Path:
    rest = name[len(m.prefix):]
    return m.root / rest if rest else m.root


def _walk(root: Path, base: str, *, recursive: bool) -> Iterator[ObjectInfo]:
    """Objects under ``root`` named ``base`` + relative path: files, and directories as ``x/``
    placeholders (before what they hold)."""
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
            yield ObjectInfo(name, 0, st.st_mtime_ns, True)
            if recursive:
                yield from _walk(Path(entry.path), name, recursive=True)
        elif entry.is_file():
            yield ObjectInfo(f"{base}{entry.name}", st.st_size, st.st_mtime_ns)


def _check(name: str) -> None:
    parts = name.split("/")
    if name.endswith("/"):
        parts = parts[:-1]
    if "\0" in name or (name and any(p in ("", ".", "..") for p in parts)):
        raise BadName(f"object name {name!r} cannot be a file: it has an empty, '.' or '..' segment")
