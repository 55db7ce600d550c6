"""The dashboard's JSON API (``/api/...``): every page reads through it, and so can scripts.

Reads go through :class:`multiworker.ui.views.Views`; the two actions (cancel, delete) through
``monitor.lifecycle``, in the worker pool since they wait for the job to stop.
"""

from __future__ import annotations

import asyncio
import logging
import time

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from multiworker.errors import JobNotFound, UserError
from multiworker.monitor.lifecycle import cancel_job, delete_job
from multiworker.monitor.logs import log_files, read_logs
from multiworker.status import primary_name
from multiworker.ui.logstream import MAX_LINE, LogStream, parse_resume, sse_message

__all__ = ["routes"]

log = logging.getLogger(__name__)

_MAX_POINTS = 5000
_POLL = 0.3
_KEEPALIVE = 15.0
MAX_STREAMS = 32  # live log streams open at once; each holds the store open


def _int(request: Request, name: str, default: int | None, *, low: int = 0, high: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise UserError(f"?{name}={raw!r}: not a whole number") from None
    if value < low or (high is not None and value > high):
        raise UserError(f"?{name}={value}: must be between {low} and {high if high is not None else 'any'}")
    return value


def _job_id(request: Request) -> str:
    job_id = request.path_params["job_id"]
    if not request.app.state.views.has_job(job_id):
        raise JobNotFound(f"no job {job_id!r}")
    return job_id


def jobs(request: Request) -> JSONResponse:
    limit = _int(request, "limit", 500, low=1, high=10_000)
    return JSONResponse({"jobs": request.app.state.views.jobs(limit), "now": time.time()})


def job(request: Request) -> JSONResponse:
    job_id = _job_id(request)
    doc = request.app.state.views.job(job_id)
    return JSONResponse({**doc, "tensorboard": request.app.state.tensorboards.status(job_id)})


def series(request: Request) -> JSONResponse:
    points = _int(request, "points", 1000, low=10, high=_MAX_POINTS)
    return JSONResponse(request.app.state.views.series(_job_id(request), points))


def compare(request: Request) -> JSONResponse:
    ids = [i for i in request.query_params.get("ids", "").split(",") if i]
    if not ids:
        raise UserError("?ids=: give the jobs to compare, comma-separated")
    points = _int(request, "points", 1000, low=10, high=_MAX_POINTS)
    return JSONResponse(request.app.state.views.compare(list(dict.fromkeys(ids)), points))


def _replica(request: Request, store, job_id: str) -> str:
    return request.query_params.get("replica") or primary_name(store.get_job(job_id))


def logs(request: Request) -> JSONResponse:
    """The last ``tail`` lines (default 1000) of one replica's log in one attempt (default the latest),
    each cut at MAX_LINE as the live stream does."""
    job_id = _job_id(request)
    tail = _int(request, "tail", 1000, low=0, high=100_000)
    store = request.app.state.views.store()
    try:
        replica = _replica(request, store, job_id)
        shown, files = log_files(store, job_id, attempt=_int(request, "attempt", None), replica=replica)
        lines = [line.text for line in read_logs(files, shown, tail=tail, max_line=MAX_LINE)]
    finally:
        store.close()
    return JSONResponse({"replica": replica, "attempt": shown, "lines": lines})


def log_raw(request: Request) -> FileResponse:
    """The whole log file of one replica and attempt, as plain text."""
    job_id = _job_id(request)
    store = request.app.state.views.store()
    try:
        replica = _replica(request, store, job_id)
        shown, files = log_files(store, job_id, attempt=_int(request, "attempt", None), replica=replica)
    finally:
        store.close()
    path = files[0][1]
    if not path.is_file():
        raise JobNotFound(f"{replica} wrote no log in attempt {shown} yet")
    return FileResponse(path, media_type="text/plain; charset=utf-8", content_disposition_type="inline",
                        filename=f"{job_id}-attempt_{shown}-{replica}.log")


async def log_stream(request: Request) -> Response:
    """Server-sent events: ``attempt``, ``lines`` (id ``attempt:offset``), then ``end`` or ``gone``.
    Resumes after the Last-Event-ID header (a reconnecting EventSource) or ``?from=attempt:offset``."""
    views = request.app.state.views
    job_id = await run_in_threadpool(_job_id, request)
    open_streams = request.app.state.streams
    if len(open_streams) >= MAX_STREAMS:
        return JSONResponse({"error": f"{MAX_STREAMS} live log streams are open, the most the dashboard serves; "
                                      "close some pages and retry"}, status_code=503, headers={"retry-after": "5"})
    store = await run_in_threadpool(views.store)
    try:
        replica = await run_in_threadpool(_replica, request, store, job_id)
        stream = LogStream(job_id, replica, attempt=_int(request, "attempt", None),
                           tail=_int(request, "tail", 1000, high=100_000),
                           resume=parse_resume(request.headers.get("last-event-id"))
                           or parse_resume(request.query_params.get("from")))
        await run_in_threadpool(stream.check, store)
    except BaseException:
        store.close()
        raise
    stopping = request.app.state.stopping

    token = object()

    async def events():
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        open_streams.add(token)
        try:
            yield "retry: 2000\n\n"
            while not stopping():
                batch, done = await run_in_threadpool(stream.poll, store)
                for event in batch:
                    yield sse_message(event["event"], event["data"], event.get("id"))
                if batch:
                    quiet_since = loop.time()
                elif loop.time() - quiet_since > _KEEPALIVE:
                    yield ": keepalive\n\n"
                    quiet_since = loop.time()
                if done:
                    return
                if not any(e["event"] == "attempt" and e["data"].get("restart") for e in batch):
                    await asyncio.sleep(_POLL)
        finally:
            open_streams.discard(token)
            store.close()

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"cache-control": "no-cache", "x-accel-buffering": "no"})


def cancel(request: Request) -> JSONResponse:
    job_id = _job_id(request)
    views = request.app.state.views
    store = views.store()
    try:
        record = cancel_job(store, job_id)
    finally:
        store.close()
        views.forget(job_id)
    log.info("job %s cancelled from the dashboard: %s", job_id, record.state)
    return JSONResponse({"id": job_id, "state": record.state, "message": record.message})


def delete(request: Request) -> JSONResponse:
    """Delete a job; a running one only with ``?force=1`` (it is cancelled first)."""
    job_id = _job_id(request)
    views = request.app.state.views
    store = views.store()
    try:
        result = delete_job(store, job_id, force=request.query_params.get("force") in ("1", "true"))
    finally:
        store.close()
        views.forget(job_id)
    log.info("job %s deleted from the dashboard", job_id)
    return JSONResponse({**result, "deleted": True})


async def tensorboard(request: Request) -> JSONResponse:
    """GET: is the job's TensorBoard running; POST: start it (on this, the event loop's, thread)."""
    job_id = await run_in_threadpool(_job_id, request)
    boards = request.app.state.tensorboards
    if request.method == "GET":
        return JSONResponse(await run_in_threadpool(boards.status, job_id))
    return JSONResponse(await boards.start(job_id))


routes = [
    Route("/api/jobs", jobs),
    Route("/api/jobs/{job_id}", job),
    Route("/api/jobs/{job_id}/series", series),
    Route("/api/jobs/{job_id}/logs", logs),
    Route("/api/jobs/{job_id}/logs/raw", log_raw),
    Route("/api/jobs/{job_id}/logs/stream", log_stream),
    Route("/api/jobs/{job_id}/cancel", cancel, methods=["POST"]),
    Route("/api/jobs/{job_id}/delete", delete, methods=["POST"]),
    Route("/api/jobs/{job_id}/tensorboard", tensorboard, methods=["GET", "POST"]),
    Route("/api/compare", compare),
]
