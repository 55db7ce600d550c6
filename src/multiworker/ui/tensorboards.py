"""TensorBoard for a job, started on demand from the job page (``monitor.tensorboard.launch``) and
stopped with the dashboard. One per job; a second request reuses the running one."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from multiworker.errors import UserError
from multiworker.job import Store
from multiworker.monitor import tensorboard

__all__ = ["TensorBoards"]

log = logging.getLogger(__name__)


class TensorBoards:
    """The dashboard's TensorBoard processes, by job id.

    :meth:`start` must run on the server's event-loop thread: the child is tied to the thread that
    spawns it (PDEATHSIG), and worker-pool threads come and go.
    """

    def __init__(self, home: Path | None, host: str = "127.0.0.1"):
        self.home = home
        self.host = host
        self._running: dict[str, tensorboard.Launched] = {}

    def status(self, job_id: str) -> dict:
        tb = self._running.get(job_id)
        if tb is None or tb.proc.poll() is not None:
            return {"state": "stopped", "url": None}
        return {"state": "running" if tb.listening() else "starting", "url": tb.url}

    async def start(self, job_id: str, wait: float = 60.0) -> dict:
        """Start (or reuse) the job's TensorBoard; wait up to ``wait`` seconds for it to listen."""
        tb = self._running.get(job_id)
        if tb is None or tb.proc.poll() is not None:
            store = Store(self.home)
            try:
                tb = tensorboard.launch(store, job_id, host=self.host)
            finally:
                store.close()
            self._running[job_id] = tb
            log.info("job %s: TensorBoard pid %s on %s", job_id, tb.proc.pid, tb.url)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        while not await asyncio.to_thread(tb.listening):
            failure = tb.failure()
            if failure:
                self._running.pop(job_id, None)
                raise UserError(failure)
            if loop.time() > deadline:
                return {"state": "starting", "url": tb.url}
            await asyncio.sleep(0.3)
        return {"state": "running", "url": tb.url}

    def stop_all(self) -> None:
        for job_id, tb in list(self._running.items()):
            tb.stop()
            self._running.pop(job_id, None)
