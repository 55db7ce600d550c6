"""The replicas' log files a group reads from: each read returns what was written since the last one.

Shared by the groups whose replicas write their own log files on this machine (local processes,
containers); the controller turns the bytes into lines, metric lines and events.
"""

from __future__ import annotations

from pathlib import Path

from multiworker.cluster import ReplicaId

__all__ = ["LogTails"]

_READ_CHUNK = 1 << 20  # at most this much of one log a read, so one chatty replica cannot stall the loop


class LogTails:
    def __init__(self) -> None:
        self._paths: dict[ReplicaId, Path] = {}
        self._offsets: dict[ReplicaId, int] = {}

    def add(self, replica: ReplicaId, path: Path) -> None:
        """Read ``replica``'s log at ``path`` from its start."""
        self._paths[replica] = path
        self._offsets[replica] = 0

    def read(self, replica: ReplicaId) -> bytes:
        """The bytes ``replica`` wrote since the last read (b"" for an unknown replica or an unreadable file)."""
        path = self._paths.get(replica)
        if path is None:
            return b""
        try:
            with open(path, "rb") as f:
                f.seek(self._offsets[replica])
                chunk = f.read(_READ_CHUNK)
        except OSError:
            return b""
        self._offsets[replica] += len(chunk)
        return chunk

    def paths(self) -> list[Path]:
        return list(self._paths.values())

    def clear(self) -> None:
        self._paths.clear()
        self._offsets.clear()
