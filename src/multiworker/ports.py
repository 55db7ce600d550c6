"""Port reservations shared by every launcher of one home, so two jobs starting together never get
the same port: a free port is chosen and recorded under ``<home>/ports`` while a lock is held, and
no other reservation hands it out until it is released (the group closes) or its owner is gone
(the driver died without releasing: its entries are reclaimed by the next reservation)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

from multiworker import procs

__all__ = ["PortReservations"]

log = logging.getLogger(__name__)

_TRIES = 200  # kernel-chosen ports already reserved by someone else are skipped, up to this many times


class PortReservations:
    """This process's reservations in ``<home>/ports/reserved.json`` (port -> owner pid, start
    ticks, token); one instance per group, ``release`` gives back everything it reserved."""

    def __init__(self, home: Path | str):
        self.dir = Path(home) / "ports"
        self.token = uuid.uuid4().hex
        self._pid = os.getpid()
        self._ticks = procs.start_ticks(self._pid)

    def reserve(self, n: int, host: str = "127.0.0.1") -> list[int]:
        """``n`` distinct ports free on ``host`` now and reserved by no live owner."""
        with self._locked() as table:
            taken = set(table)
            chosen: list[int] = []
            sockets: list[socket.socket] = []
            try:
                for _ in range(_TRIES + n):
                    if len(chosen) == n:
                        break
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.bind((host, 0))
                    sockets.append(s)  # held until all are chosen, so the kernel gives n distinct ports
                    port = s.getsockname()[1]
                    if str(port) not in taken:
                        chosen.append(port)
            finally:
                for s in sockets:
                    s.close()
            if len(chosen) < n:
                raise OSError(f"could not find {n} free ports on {host} not reserved by another job")
            for port in chosen:
                table[str(port)] = {"pid": self._pid, "ticks": self._ticks, "token": self.token}
            return chosen

    def release(self) -> None:
        """Give back every port this instance reserved."""
        with self._locked() as table:
            for port in [p for p, owner in table.items() if owner.get("token") == self.token]:
                del table[port]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[dict]:
        """The table of live reservations, under an exclusive lock, written back afterwards."""
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        path = self.dir / "reserved.json"
        with open(self.dir / "lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            table = self._read(path)
            before = dict(table)
            ticks: dict[int, int | None] = {}  # each owner's pid looked up once
            table = {p: o for p, o in table.items() if _owner_alive(o, ticks)}
            yield table
            if table != before:
                tmp = path.with_suffix(f".{self._pid}.tmp")
                tmp.write_text(json.dumps(table))
                os.replace(tmp, path)

    @staticmethod
    def _read(path: Path) -> dict:
        try:
            table = json.loads(path.read_text())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable port reservations %s: %s", path, exc)
            return {}
        return table if isinstance(table, dict) else {}


def _owner_alive(owner: object, seen: dict[int, int | None]) -> bool:
    """Whether the reservation's owner process still runs (same pid, same start time)."""
    if not isinstance(owner, dict) or not isinstance(owner.get("pid"), int):
        return False
    pid = owner["pid"]
    if pid not in seen:
        seen[pid] = procs.start_ticks(pid)
    return seen[pid] is not None and seen[pid] == owner.get("ticks")
