"""Taking and saving a dump of every replica's Python stacks for the group controller: after a hang
(``<time>-hung``), or when ``multiworker stacks`` asks a running job for one (the request file
names the folder). Each dump is a folder ``<job_dir>/attempt_<n>/stacks/<name>/`` with one
``<replica>.txt`` per replica and ``index.txt`` (why, when, the laggard), written last: a reader
waits for it."""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from multiworker.backends.base import ReplicaGroup
from multiworker.cluster import ReplicaId
from multiworker.job import LogLayout
from multiworker.stacks import Dump, pick_laggard

__all__ = ["StackDump", "take", "read_request", "INDEX"]

log = logging.getLogger(__name__)

INDEX = "index.txt"
_NAME = re.compile(r"^[\w.-]{1,80}$")


@dataclasses.dataclass
class StackDump:
    folder: Path
    dumps: dict[str, Dump]
    laggard: tuple[str, str] | None


def take(group: ReplicaGroup, replicas: Iterable[ReplicaId], layout: LogLayout, attempt: int, name: str, why: str,
         steps: Mapping[str, int | None]) -> StackDump:
    """Dump every replica's stacks (in turn, on its node), save them, name the laggard."""
    dumps: dict[str, Dump] = {}
    for rid in replicas:
        try:
            d = group.dump_stacks(rid)
        except Exception as exc:  # noqa: BLE001 - a dump must never end supervision
            log.warning("%s: reading its stacks failed: %r", rid, exc)
            d = Dump(rid.name, None, "unknown", error=repr(exc)[:300])
        d.step = steps.get(rid.name)
        dumps[rid.name] = d
    laggard = pick_laggard(dumps)
    folder = layout.stacks_dir(attempt) / name
    folder.mkdir(parents=True, exist_ok=True)
    for d in dumps.values():
        (folder / f"{d.replica}.txt").write_text(d.header() + "\n" + (d.text or f"(no stacks: {d.error})") + "\n")
    lines = [f"why: {why}", f"time: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}", f"attempt: {attempt}",
             f"laggard: {laggard[0]} ({laggard[1]})" if laggard else "laggard: none stands out",
             *(f"{d.replica}: {d.replica}.txt" for d in dumps.values())]
    tmp = folder / (INDEX + ".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, folder / INDEX)
    return StackDump(folder, dumps, laggard)


def read_request(layout: LogLayout) -> str | None:
    """The dump folder name a pending ``stacks`` request asks for (the request is consumed), or None."""
    path = layout.stacks_request
    try:
        name = path.read_text().strip()
        path.unlink()
    except OSError:
        return None
    return name if _NAME.match(name) else None
