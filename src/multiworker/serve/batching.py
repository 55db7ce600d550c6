"""Server-side batching of concurrent requests, as TF Serving's batching options do it.

Requests wait in a bounded queue (full -> 503). Up to ``threads`` model calls run at once (TF
Serving's ``num_batch_threads``): by default one with batching, since one call already uses every
core through TensorFlow's own thread pool, and four without. When a call slot is free, a batch starts
with the oldest request and takes every queued request for the same signature and per-row shapes,
up to ``max_batch_size`` rows. With ``timeout`` 0 (the default, TF Serving's advice for CPU-only
serving) it runs what is queued at once: while a call runs, the requests that arrive queue up and
form the next batch, so batches grow with the load by themselves. A ``timeout`` above 0 lets a batch
that already has company wait up to that long to fill (worth it where a call costs about the same
for 1 row as for many, as on a GPU); a lone request never waits. A request with more rows than fit
is split: the rest goes to the back of the queue, so a 10,000-row request shares the model with the
requests that arrive meanwhile instead of holding it for 300 calls. Inputs are concatenated into one
model call and the outputs split back. If a merged call fails, each part is retried alone, so one
bad request cannot fail its neighbours. Without batching, calls run concurrently, still bounded and
still split into calls of at most ``max_batch_size`` rows.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from multiworker.serve.codec import leading_rows
from multiworker.serve.metrics import Metrics
from multiworker.serve.signatures import BadRequest, Unavailable

__all__ = ["Batcher", "BatchOptions"]

log = logging.getLogger(__name__)

Run = Callable[[str, dict[str, np.ndarray]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class BatchOptions:
    enabled: bool = True
    max_batch_size: int = 32
    timeout: float = 0.0
    max_queue: int = 1000
    threads: int | None = None  # model calls at once; None: 1 with batching, 4 without

    @property
    def calls_at_once(self) -> int:
        return max(1, self.threads or (1 if self.enabled else 4))


@dataclass(eq=False)
class _Item:
    signature: str
    inputs: dict[str, np.ndarray]
    rows: int | None  # None: inputs without a shared 0-th dimension; run alone, unsplit
    future: asyncio.Future
    sent: int = 0  # rows handed to model calls so far
    done: int = 0  # rows whose outputs came back
    parts: list = field(default_factory=list)  # (first row, outputs) of those calls, in any order
    key: tuple = ()

    def __post_init__(self) -> None:
        self.key = (self.signature, tuple((k, v.shape[1:], v.dtype.str) for k, v in sorted(self.inputs.items())))

    def slice(self, start: int, stop: int) -> dict[str, np.ndarray]:
        if self.rows is None or (start == 0 and stop == self.rows):
            return self.inputs
        return {k: v[start:stop] for k, v in self.inputs.items()}


@dataclass
class _Part:
    item: _Item
    start: int
    stop: int

    @property
    def rows(self) -> int:
        return self.stop - self.start


class Batcher:
    """Owns the queue, the batching task and the thread the model runs on. Use inside a running loop."""

    def __init__(self, run: Run, options: BatchOptions, metrics: Metrics | None = None):
        self._run, self.options, self.metrics = run, options, metrics
        self._queue: deque[_Item] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None
        self._inflight = 0
        self._calls: set[asyncio.Task] = set()
        self._pool = ThreadPoolExecutor(max_workers=options.calls_at_once, thread_name_prefix="serve-model")

    def depth(self) -> int:
        return len(self._queue) if self._task is not None else self._inflight

    async def start(self) -> None:
        if self.options.enabled:
            self._wake = asyncio.Event()
            self._task = asyncio.create_task(self._loop(), name="batcher")

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._calls:
            await asyncio.gather(*self._calls, return_exceptions=True)
        for item in self._queue:
            if not item.future.done():
                item.future.set_exception(Unavailable("the server is shutting down"))
        self._queue.clear()
        self._pool.shutdown(wait=True)

    async def submit(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        loop = asyncio.get_running_loop()
        if self._task is None:
            return await self._unbatched(signature, inputs)
        if len(self._queue) >= self.options.max_queue:
            raise Unavailable(f"the request queue is full ({self.options.max_queue} requests waiting); retry later")
        item = _Item(signature, inputs, leading_rows(inputs), loop.create_future())
        self._queue.append(item)
        assert self._wake is not None
        self._wake.set()
        return await item.future

    async def _unbatched(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if self._inflight >= self.options.max_queue:
            raise Unavailable(f"too many requests in flight ({self._inflight}); retry later")
        loop = asyncio.get_running_loop()
        rows, size = leading_rows(inputs), self.options.max_batch_size
        item = _Item(signature, inputs, rows, loop.create_future())
        self._inflight += 1
        try:
            for start in range(0, rows or 1, size):
                stop = min(start + size, rows) if rows else 0
                item.parts.append((start, await loop.run_in_executor(self._pool, self._run, signature,
                                                                     item.slice(start, stop))))
                self._observe(1, (stop - start) or 1)
        finally:
            self._inflight -= 1
        try:
            return _join(item.parts)
        except ValueError:
            raise BadRequest(f"the model's outputs are not batched along the 0-th dimension, so a request of "
                             f"{rows} rows cannot run as calls of at most {size} (--max-batch-size)") from None

    def _observe(self, requests: int, rows: int) -> None:
        if self.metrics:
            self.metrics.batch(requests, rows)

    async def _wait(self, timeout: float | None = None) -> bool:
        """Wait for a new request (at most ``timeout`` s); whether one came."""
        assert self._wake is not None
        self._wake.clear()
        try:
            async with asyncio.timeout(timeout):
                await self._wake.wait()
        except TimeoutError:
            return False
        return True

    def _take(self, item: _Item, room: int) -> _Part:
        """Up to ``room`` of the item's remaining rows; what is left goes to the back of the queue."""
        if item.rows is None:
            return _Part(item, 0, 0)
        start = item.sent
        item.sent = min(item.rows, start + room)
        if item.sent < item.rows:
            self._queue.append(item)
        return _Part(item, start, item.sent)

    def _pop_live(self) -> _Item | None:
        while self._queue:
            item = self._queue.popleft()
            if not item.future.done():  # a client that went away, or a request already failed, is dropped
                return item
        return None

    async def _collect(self) -> list[_Part]:
        loop = asyncio.get_running_loop()
        first = self._pop_live()
        while first is None:
            await self._wait()
            first = self._pop_live()
        limit = self.options.max_batch_size
        batch = [self._take(first, limit)]
        if first.rows is None:
            return batch
        rows, deadline = batch[0].rows, loop.time() + self.options.timeout
        while rows < limit:
            item = next((i for i in self._queue if i.rows is not None and i.key == first.key
                         and i is not first and not i.future.done()), None)
            if item is None:
                remaining = deadline - loop.time()
                if len(batch) == 1 or remaining <= 0:  # a lone request does not wait for company
                    break
                if not await self._wait(remaining):
                    break
                continue
            self._queue.remove(item)
            part = self._take(item, limit - rows)
            batch.append(part)
            rows += part.rows
        return batch

    async def _loop(self) -> None:
        slots = asyncio.Semaphore(self.options.calls_at_once)
        while True:
            await slots.acquire()
            try:
                parts = await self._collect()
            except BaseException:
                slots.release()
                raise
            call = asyncio.create_task(self._batch(parts, slots))
            self._calls.add(call)
            call.add_done_callback(self._calls.discard)

    async def _batch(self, parts: list[_Part], slots: asyncio.Semaphore) -> None:
        try:
            await self._call(parts)
        except Exception as exc:  # noqa: BLE001 - the batcher must outlive any one batch
            log.exception("a batch failed")
            for part in parts:
                if not part.item.future.done():
                    part.item.future.set_exception(exc)
        finally:
            slots.release()

    async def _call(self, parts: list[_Part]) -> None:
        loop = asyncio.get_running_loop()
        live = [p for p in parts if not p.item.future.done()]
        if not live:
            return
        first = live[0].item
        merged = first.slice(live[0].start, live[0].stop) if len(live) == 1 else {
            k: np.concatenate([p.item.inputs[k][p.start:p.stop] for p in live]) for k in first.inputs}
        try:
            outputs = await loop.run_in_executor(self._pool, self._run, first.signature, merged)
            pieces = _split(outputs, [p.rows for p in live]) if len(live) > 1 else [outputs]
        except Exception as exc:  # noqa: BLE001 - delivered to the request(s) that caused it
            if len(live) > 1:
                for part in live:
                    await self._call([part])
                return
            if not first.future.done():
                first.future.set_exception(exc)
            return
        self._observe(len(live), sum(p.rows or 1 for p in live))
        for part, piece in zip(live, pieces):
            item = part.item
            item.parts.append((part.start, piece))
            item.done += part.rows
            if (item.rows is None or item.done == item.rows) and not item.future.done():
                try:
                    item.future.set_result(_join(item.parts))
                except ValueError:
                    item.future.set_exception(BadRequest(
                        f"the model's outputs are not batched along the 0-th dimension, so a request of {item.rows} "
                        f"rows cannot run as calls of at most {self.options.max_batch_size} (--max-batch-size)"))
                item.parts = []


def _join(parts: list[tuple[int, dict[str, np.ndarray]]]) -> dict[str, np.ndarray]:
    """One request's outputs from its calls' (first row, outputs), which may have finished in any order."""
    if len(parts) == 1:
        return parts[0][1]
    ordered = [outputs for _, outputs in sorted(parts, key=lambda p: p[0])]
    return {k: np.concatenate([p[k] for p in ordered]) for k in ordered[0]}


def _split(outputs: dict[str, np.ndarray], rows: list[int]) -> list[dict[str, np.ndarray]]:
    total = sum(rows)
    if any(v.ndim == 0 or v.shape[0] != total for v in outputs.values()):
        raise ValueError("an output is not batched along the 0-th dimension")
    cuts = np.cumsum(rows)[:-1]
    pieces = {k: np.split(v, cuts) for k, v in outputs.items()}
    return [{k: pieces[k][n] for k in outputs} for n in range(len(rows))]
