"""Server-side batching of concurrent requests, as TF Serving's batching options do it.

Requests wait in a bounded queue (full -> 503). A batch starts with the oldest request and takes
more while its rows stay within ``max_batch_size`` and ``timeout`` has not passed since it started.
A request with nothing else queued runs at once: waiting out the timeout for company that is not
coming only added latency (at one client, p50 9 ms instead of 3 ms; see BENCHMARKS.md). Under
concurrent load requests pile up while the model runs, so batches still form;
requests for the same signature with the same per-row shapes are concatenated into one model call
and the outputs split back. If a merged call fails, each request is retried alone, so one bad
request cannot fail its neighbours. Without batching, calls run concurrently, still bounded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from multiworker.serve.codec import leading_rows
from multiworker.serve.metrics import Metrics
from multiworker.serve.signatures import Unavailable

__all__ = ["Batcher", "BatchOptions"]

log = logging.getLogger(__name__)

Run = Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class BatchOptions:
    enabled: bool = True
    max_batch_size: int = 32
    timeout: float = 0.005
    max_queue: int = 1000
    threads: int = 4  # model calls at once when batching is off


@dataclass
class _Item:
    signature: str
    inputs: dict[str, np.ndarray]
    rows: int | None
    future: asyncio.Future

    def key(self) -> tuple:
        return (self.signature, tuple((k, v.shape[1:], v.dtype.str) for k, v in sorted(self.inputs.items())))


class Batcher:
    """Owns the queue, the batching task and the thread the model runs on. Use inside a running loop."""

    def __init__(self, run: Run, options: BatchOptions, metrics: Metrics | None = None):
        self._run, self.options, self.metrics = run, options, metrics
        self._queue: asyncio.Queue[_Item] | None = None
        self._task: asyncio.Task | None = None
        self._carry: _Item | None = None
        self._inflight = 0
        self._pool = ThreadPoolExecutor(max_workers=1 if options.enabled else options.threads,
                                        thread_name_prefix="serve-model")

    def depth(self) -> int:
        if self._queue is None:
            return self._inflight
        return self._queue.qsize() + (self._carry is not None)

    async def start(self) -> None:
        if self.options.enabled:
            self._queue = asyncio.Queue(maxsize=self.options.max_queue)
            self._task = asyncio.create_task(self._loop(), name="batcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        pending = ([self._carry] if self._carry else []) + _drain(self._queue)
        for item in pending:
            if not item.future.done():
                item.future.set_exception(Unavailable("the server is shutting down"))
        self._pool.shutdown(wait=True)

    async def submit(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        loop = asyncio.get_running_loop()
        if self._queue is None:
            if self._inflight >= self.options.max_queue:
                raise Unavailable(f"too many requests in flight ({self._inflight}); retry later")
            self._inflight += 1
            try:
                result = await loop.run_in_executor(self._pool, self._run, signature, inputs)
            finally:
                self._inflight -= 1
            self._observe(1, leading_rows(inputs) or 1)
            return result
        item = _Item(signature, inputs, leading_rows(inputs), loop.create_future())
        try:
            self._queue.put_nowait(item)
        except asyncio.QueueFull:
            raise Unavailable(f"the request queue is full ({self.options.max_queue} requests waiting); "
                              "retry later") from None
        return await item.future

    def _observe(self, requests: int, rows: int) -> None:
        if self.metrics:
            self.metrics.batch(requests, rows)

    async def _next(self) -> _Item:
        if self._carry is not None:
            item, self._carry = self._carry, None
            return item
        return await self._queue.get()

    async def _collect(self) -> list[_Item]:
        loop = asyncio.get_running_loop()
        first = await self._next()
        batch, rows = [first], first.rows
        deadline = loop.time() + self.options.timeout
        while rows is not None and rows < self.options.max_batch_size:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                remaining = deadline - loop.time()
                if remaining <= 0 or len(batch) == 1:  # a lone request does not wait for company
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), remaining)
                except TimeoutError:
                    break
            if item.rows is None or rows + item.rows > self.options.max_batch_size:
                self._carry = item  # starts the next batch
                break
            batch.append(item)
            rows += item.rows
        return batch

    async def _loop(self) -> None:
        while True:
            batch = await self._collect()
            groups: dict[tuple, list[_Item]] = {}
            for item in batch:
                groups.setdefault(item.key() if item.rows else id(item), []).append(item)
            for items in groups.values():
                await self._call(items)

    async def _call(self, items: list[_Item]) -> None:
        loop = asyncio.get_running_loop()
        live = [i for i in items if not i.future.done()]  # a client that went away is skipped
        if not live:
            return
        merged = live[0].inputs if len(live) == 1 else {
            k: np.concatenate([i.inputs[k] for i in live]) for k in live[0].inputs}
        try:
            outputs = await loop.run_in_executor(self._pool, self._run, live[0].signature, merged)
            parts = _split(outputs, [i.rows for i in live]) if len(live) > 1 else [outputs]
        except Exception as exc:  # noqa: BLE001 - delivered to the request(s) that caused it
            if len(live) > 1:
                for item in live:
                    await self._call([item])
                return
            if not live[0].future.done():
                live[0].future.set_exception(exc)
            return
        self._observe(len(live), sum(i.rows or 1 for i in live))
        for item, part in zip(live, parts):
            if not item.future.done():
                item.future.set_result(part)


def _split(outputs: dict[str, np.ndarray], rows: list[int]) -> list[dict[str, np.ndarray]]:
    total = sum(rows)
    if any(v.ndim == 0 or v.shape[0] != total for v in outputs.values()):
        raise ValueError("an output is not batched along the 0-th dimension")
    cuts = np.cumsum(rows)[:-1]
    pieces = {k: np.split(v, cuts) for k, v in outputs.items()}
    return [{k: pieces[k][n] for k in outputs} for n in range(len(rows))]


def _drain(queue: asyncio.Queue | None) -> list[_Item]:
    items = []
    while queue is not None and not queue.empty():
        items.append(queue.get_nowait())
    return items
