"""The dashboard as an ASGI app: pages (jobs, one job, compare, a job's output files), the JSON
API (:mod:`multiworker.ui.api`), static files, and the access rules of :mod:`multiworker.ui.security`."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from multiworker import __version__
from multiworker.errors import JobNotFound, UserError
from multiworker.job import JobRecord
from multiworker.ui import api
from multiworker.ui.files import FILE_CSP, listing, resolve_inside, served_type
from multiworker.ui.security import Guard, new_token
from multiworker.ui.tensorboards import TensorBoards
from multiworker.ui.views import Views

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_HERE = Path(__file__).resolve().parent
_templates = Jinja2Templates(directory=str(_HERE / "templates"))
_templates.env.filters["fmt_size"] = lambda n: "-" if n is None else (
    f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB")
_templates.env.filters["fmt_time"] = lambda ts: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts))


def _page(request: Request, name: str, status_code: int = 200, **context) -> Response:
    context = {"token": request.app.state.token, "version": __version__, **context}
    return _templates.TemplateResponse(request, name, context, status_code=status_code)


def jobs_page(request: Request) -> Response:
    return _page(request, "jobs.html", title="Jobs")


def compare_page(request: Request) -> Response:
    return _page(request, "compare.html", title="Compare", ids=request.query_params.get("ids", ""))


def _job_or_404(request: Request) -> JobRecord:
    job_id = request.path_params["job_id"]
    store = request.app.state.views.store()
    try:
        return store.get_job(job_id)
    finally:
        store.close()


def job_page(request: Request) -> Response:
    job = _job_or_404(request)
    return _page(request, "job.html", title=f"{job.name} ({job.id})", job=job)


def files_page(request: Request) -> Response:
    """A listing of (or a file in) the job's output directory."""
    job = _job_or_404(request)
    if not job.output_dir or not Path(job.output_dir).is_dir():
        raise JobNotFound(f"job {job.id} has no output directory yet ({job.output_dir})")
    root = Path(job.output_dir)
    relative = request.path_params.get("path", "")
    target = resolve_inside(root, relative)
    if target.is_file():
        return FileResponse(target, media_type=served_type(target), content_disposition_type="inline",
                            headers={"content-security-policy": FILE_CSP})
    if relative and not relative.endswith("/"):
        return RedirectResponse(request.url.path + "/", status_code=307)
    parent = str(Path(relative.rstrip("/")).parent) if relative.strip("/") else None
    return _page(request, "files.html", title=f"{job.name}: output", job=job, root=str(root),
                 relative=relative.strip("/"), parent=None if parent is None else ("" if parent == "." else parent),
                 entries=listing(root, target))


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def _error(request: Request, status: int, message: str) -> Response:
    if _wants_json(request):
        return JSONResponse({"error": message}, status_code=status)
    return _page(request, "error.html", status_code=status, title=f"{status}", message=message)


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(request, 404, str(exc))


async def _bad_request(request: Request, exc: Exception) -> Response:
    return _error(request, 400, str(exc))


async def _http_error(request: Request, exc: HTTPException) -> Response:
    return _error(request, exc.status_code, exc.detail)


def create_app(home: Path | str | None = None, *, token: str | None = None, remote: bool = False,
               tensorboard_host: str = "127.0.0.1", stopping: Callable[[], bool] | None = None) -> Starlette:
    """The dashboard over the store at ``home`` (default MULTIWORKER_HOME).

    ``remote``: the server listens beyond loopback, so every request needs ``token``.
    ``stopping``: tells long-lived streams that the server is shutting down.
    """
    home = Path(home) if home is not None else None
    token = token or new_token()
    views = Views(home)
    boards = TensorBoards(home, host=tensorboard_host)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        try:
            yield
        finally:
            await run_in_threadpool(boards.stop_all)

    routes = [
        Route("/", jobs_page),
        Route("/compare", compare_page),
        Route("/jobs/{job_id}", job_page),
        Route("/jobs/{job_id}/files/{path:path}", files_page),
        Route("/jobs/{job_id}/files", lambda r: RedirectResponse(r.url.path + "/", status_code=307)),
        *api.routes,
        Mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[Middleware(Guard, token=token, remote=remote)],
        exception_handlers={JobNotFound: _not_found, UserError: _bad_request, HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.views = views
    app.state.tensorboards = boards
    app.state.token = token
    app.state.remote = remote
    app.state.stopping = stopping or (lambda: False)
    app.state.streams = set()  # the live log streams open now
    return app
