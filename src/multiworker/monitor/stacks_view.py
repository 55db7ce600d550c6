"""``multiworker stacks``: every replica's Python stacks, live from a running job (its driver takes
the dump, on each replica's node, and saves it under the job), or the dumps saved when an attempt hung."""

from __future__ import annotations

import dataclasses
import secrets
import time
from pathlib import Path

from multiworker.backends.base import backend_class
from multiworker.backends.stack_dumps import INDEX
from multiworker.errors import UserError
from multiworker.job import JobRecord, Store
from multiworker.stacks import main_thread
from multiworker.status import refresh_liveness

__all__ = ["SavedDump", "live_dump", "saved_dumps", "read_dump"]

#: seconds to wait for a running job's driver to take a dump (it checks about once a second)
LIVE_TIMEOUT = 90.0


@dataclasses.dataclass
class SavedDump:
    folder: Path
    index: str  # why, when, the laggard
    replicas: dict[str, str]  # replica -> its stacks (header line first)

    def main_threads(self) -> dict[str, list[str]]:
        """Each replica's main-thread frames, innermost first, as ``function (file:line)``."""
        out = {}
        for name, text in self.replicas.items():
            out[name] = [f"{func} ({file})" for func, file in main_thread(text)] or [text.splitlines()[-1][:80]]
        return out


def read_dump(folder: Path) -> SavedDump:
    index = (folder / INDEX).read_text()
    replicas = {p.stem: p.read_text() for p in sorted(folder.glob("*.txt")) if p.name != INDEX}
    return SavedDump(folder, index, replicas)


def saved_dumps(job: JobRecord, *, hung_only: bool = True) -> list[SavedDump]:
    """The job's saved dumps, oldest first (only those of hangs unless ``hung_only`` is False)."""
    found = [p.parent for p in job.layout.job_dir.glob(f"attempt_*/stacks/*/{INDEX}")]
    if hung_only:
        found = [f for f in found if f.name.endswith("-hung")]
    return [read_dump(f) for f in sorted(found, key=lambda f: (f.stat().st_mtime, f.name))]


def live_dump(store: Store, job_id: str, *, timeout: float = LIVE_TIMEOUT) -> SavedDump:
    """Ask the running job's driver for a dump now and wait for it."""
    job = refresh_liveness(store, job_id)
    if job.is_terminal:
        raise UserError(f"job {job_id} is {job.state.value}: it has no live stacks; `multiworker stacks {job_id}` "
                        "shows the stacks saved when an attempt hung")
    if not backend_class(job.backend).supervised_here:
        raise UserError(f"job {job_id} runs on {job.backend}, which restarts its replicas itself: read a replica's "
                        "stacks there, e.g. `kubectl exec POD -- py-spy dump --pid 1` (see docs/debugging.md)")
    name = time.strftime("%Y%m%d-%H%M%S-live-") + secrets.token_hex(3)
    request = job.layout.stacks_request
    request.parent.mkdir(parents=True, exist_ok=True)
    request.write_text(name + "\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = list(job.layout.job_dir.glob(f"attempt_*/stacks/{name}/{INDEX}"))
        if found:
            return read_dump(found[0].parent)
        if store.get_job(job_id).is_terminal:
            break
        time.sleep(0.2)
    request.unlink(missing_ok=True)
    raise UserError(f"job {job_id}: its driver took no dump within {timeout:g}s (it may be starting or ending an "
                    "attempt); try again")
