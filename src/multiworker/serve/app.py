"""The HTTP API: TF Serving's REST API plus Vertex AI's prediction routes, on Starlette.

TF Serving (https://www.tensorflow.org/tfx/serving/api_rest), errors as ``{"error": "..."}``:
  GET  /v1/models/NAME[/versions/N]                   model status
  GET  /v1/models/NAME[/versions/N]/metadata          signature_defs
  POST /v1/models/NAME[/versions/N]:predict|classify|regress
Vertex AI, errors as Google's ``{"error": {"code", "message", "status"}}``:
  POST /v1/projects/P/locations/L/endpoints/E:predict       PredictionService.Predict (REST)
  POST /v1/endpoints/E/deployedModels/D:predict             a custom container's default predict route
  GET  /v1/endpoints/E/deployedModels/D                     its default health route
  request {"instances": [...], "parameters": {...}} -> {"predictions": [...], "deployedModelId": ...}
Monitoring: GET /monitoring/metrics (JSON), /monitoring/prometheus/metrics (Prometheus text).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from multiworker.serve import codec, examples
from multiworker.serve.batching import Batcher, BatchOptions
from multiworker.serve.decode import Decoder, SpooledBody, signature_name
from multiworker.serve.limits import Limits
from multiworker.serve.metrics import Metrics
from multiworker.serve.signatures import (
    BadRequest,
    NotFound,
    Servable,
    ServeError,
    TimedOut,
    TooLarge,
    metadata_doc,
    status_doc,
)

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson comes with the serve extra
    _orjson = None

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_MODEL_PATH = re.compile(r"^(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
                         r"(?P<suffix>/metadata|:predict|:classify|:regress)?$")


class _JSON(Response):
    """JSON as TF Serving writes it: orjson, or ``json`` where NaN and Infinity must stay (orjson writes null)."""

    media_type = "application/json"

    def __init__(self, content: Any, status_code: int = 200, *, finite: bool = True):
        self.finite = finite
        super().__init__(content, status_code=status_code)

    def render(self, content: Any) -> bytes:
        if self.finite and _orjson is not None:
            return _orjson.dumps(content)
        return json.dumps(content, allow_nan=True, separators=(",", ":")).encode()


def _finite(outputs: dict[str, np.ndarray]) -> bool:
    return all(np.isfinite(v).all() for v in outputs.values() if v.dtype.kind in "fc")


def _tf_error(exc: ServeError) -> _JSON:
    return _JSON({"error": str(exc)}, status_code=exc.http_status)


def _google_error(exc: ServeError) -> _JSON:
    return _JSON({"error": {"code": exc.http_status, "message": str(exc), "status": exc.grpc_status}},
                 status_code=exc.http_status)


async def _read_body(request: Request, limits: Limits, large: int) -> bytes | SpooledBody:
    """The body, refused (413) past ``max_request_bytes`` and (408) when it takes over ``read_timeout``.

    A body over ``large`` bytes goes to a file as it arrives, for the decoder's worker process to read:
    joining and pickling 100 MB in this process would hold the GIL, and so every other request, meanwhile.
    """
    cap = limits.max_request_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise TooLarge(f"the request body is {int(declared):,} bytes; this server takes at most {cap:,} "
                       "(--max-request-size)")
    chunks: list[bytes] = []
    size, spool = 0, None
    try:
        async with asyncio.timeout(limits.read_timeout):
            async for chunk in request.stream():
                size += len(chunk)
                if size > cap:
                    raise TooLarge(f"the request body is over {cap:,} bytes, the most this server takes "
                                   "(--max-request-size)")
                if spool is None and size > large:
                    spool = SpooledBody()
                    for earlier in chunks:
                        spool.write(earlier)
                    chunks = []
                if spool is not None:
                    spool.write(chunk)
                else:
                    chunks.append(chunk)
    except TimeoutError:
        if spool is not None:
            spool.close()
        raise TimedOut(f"the request body did not arrive within {limits.read_timeout:g}s (--read-timeout)") from None
    except BaseException:
        if spool is not None:
            spool.close()
        raise
    if spool is not None:
        spool.finish()
        return spool
    return b"".join(chunks)


def _version_number(version: str) -> int | None:
    """The version in a URL as a number; None for a number too long to be any version."""
    if not version.isascii() or not version.isdigit():
        raise BadRequest(f"version '{version[:40]}' is not a number")
    stripped = version.lstrip("0") or "0"
    return int(stripped) if len(stripped) <= 18 else None


class _Server:
    def __init__(self, servable: Servable, name: str, options: BatchOptions, deployed_model_id: str,
                 limits: Limits):
        self.servable, self.name, self.deployed_model_id, self.limits = servable, name, deployed_model_id, limits
        self.metrics = Metrics(name, servable.version, servable.load_seconds, lambda: self.batcher.depth())
        self.batcher = Batcher(servable.run, options, self.metrics)
        self.decoder = Decoder(servable.signatures)

    def check(self, name: str, version: str | None = None, label: str | None = None) -> None:
        if name != self.name:
            raise NotFound(f"Servable not found for request: Latest({name[:100]}); this server serves '{self.name}'")
        if label is not None:
            raise NotFound(f"no version label '{label[:100]}' is configured; use /versions/{self.servable.version}")
        if version is not None and _version_number(version) != self.servable.version:
            shown = version if len(version) <= 20 else version[:20] + "..."
            raise NotFound(f"Servable not found for request: Specific({name}, {shown}); "
                           f"version {self.servable.version} is loaded")

    def signature(self, body: Any):
        name = signature_name(body)
        if name not in self.servable.signatures:
            raise NotFound(f"Serving signature name: \"{name[:200]}\" not found in signature def; "
                           f"the model has {sorted(self.servable.signatures)}")
        return self.servable.signatures[name]

    async def predict(self, raw: bytes | SpooledBody, vertex: bool = False) -> tuple[dict, bool]:
        """(response document, whether all its numbers are finite) of a :predict body."""
        signature, inputs, fmt = await self.decoder.predict(raw, vertex)
        outputs = await self.batcher.submit(signature, inputs)
        return codec.format_predict(outputs, fmt), _finite(outputs)

    async def body(self, request: Request) -> bytes | SpooledBody:
        raw = await _read_body(request, self.limits, self.decoder.large)
        if isinstance(raw, SpooledBody):
            request.state.spooled = raw
        return raw

    async def tf_serving(self, request: Request) -> Response:
        match = _MODEL_PATH.match(request.path_params["rest"])
        suffix = match and match["suffix"]
        verb = suffix[1:] if suffix and suffix.startswith(":") else None
        if not match or (request.method == "GET") == bool(verb):
            raise NotFound(f"Malformed request: {request.method} {request.url.path[:200]}")
        self.check(match["name"], match["version"], match["label"])
        if suffix == "/metadata":
            return _JSON(metadata_doc(self.name, self.servable))
        if verb is None:
            return _JSON(status_doc(self.servable))
        raw = await self.body(request)
        if verb == "predict":
            doc, finite = await self.predict(raw)
            return _JSON(doc, finite=finite)
        body = await self.decoder.json(raw)
        sig = self.signature(body)
        inputs = examples.parse_examples(body, sig, verb)
        outputs = await self.batcher.submit(sig.name, inputs)
        return _JSON(examples.format_result(outputs, verb, len(body["examples"])), finite=_finite(outputs))

    async def vertex(self, request: Request) -> Response:
        params = request.path_params
        if request.method == "GET":
            return _JSON({"status": "healthy", "model": self.name, "version": str(self.servable.version)})
        if params.get("verb", "predict") != "predict":
            raise NotFound(f"':{params['verb'][:100]}' is not served; use ':predict'")
        doc, finite = await self.predict(await self.body(request), vertex=True)
        project, location = params.get("project", "local"), params.get("location", "local")
        return _JSON({
            "predictions": doc["predictions"],
            "deployedModelId": params.get("deployed_model") or self.deployed_model_id,
            "model": f"projects/{project}/locations/{location}/models/{self.name}",
            "modelDisplayName": self.name,
            "modelVersionId": str(self.servable.version),
        }, finite=finite)


def _endpoint(server: _Server, handler, api: str, google_errors: bool = False):
    async def endpoint(request: Request) -> Response:
        started = time.monotonic()
        try:
            response = await handler(request)
        except ServeError as exc:
            response = _google_error(exc) if google_errors else _tf_error(exc)
        except RecursionError:  # a nesting the decoders let through, e.g. in a :classify feature
            deep = BadRequest("the request nests arrays or objects too deeply")
            response = _google_error(deep) if google_errors else _tf_error(deep)
        except Exception:  # noqa: BLE001 - one request's failure is a 500, not a dead server
            log.exception("%s %s failed", request.method, request.url.path)
            response = _JSON({"error": "internal error; see the server's log"}, status_code=500)
        server.metrics.request(api, response.status_code, time.monotonic() - started)
        spooled = getattr(request.state, "spooled", None)
        if spooled is not None:
            spooled.close()
            server.decoder.after_large_request()
        return response
    return endpoint


def create_app(servable: Servable, *, name: str, options: BatchOptions | None = None,
               deployed_model_id: str | None = None, limits: Limits | None = None) -> Starlette:
    """The ASGI app serving ``servable`` as model ``name``; batching runs inside its lifespan."""
    server = _Server(servable, name, options or BatchOptions(), deployed_model_id or name, limits or Limits())

    async def vertex_public(request: Request) -> Response:
        _, _, verb = request.path_params["rest"].partition(":")
        request.path_params["verb"] = verb or "predict"
        return await server.vertex(request)

    async def vertex_container(request: Request) -> Response:
        deployed, _, verb = request.path_params["rest"].partition(":")
        request.path_params.update(deployed_model=deployed, verb=verb or "predict")
        return await server.vertex(request)

    async def metrics_json(_request: Request) -> Response:
        return _JSON(server.metrics.doc())

    async def metrics_text(_request: Request) -> Response:
        return PlainTextResponse(server.metrics.prometheus(), media_type="text/plain; version=0.0.4")

    async def not_found(request: Request, exc: HTTPException) -> Response:
        message = f"Malformed request: {request.method} {request.url.path[:200]}"
        return _JSON({"error": message}, status_code=404 if exc.status_code == 404 else exc.status_code)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await server.batcher.start()
        try:
            yield
        finally:
            await server.batcher.stop()
            server.decoder.close()

    routes = [
        Route("/v1/models/{rest:path}", _endpoint(server, server.tf_serving, "tfserving"), methods=["GET", "POST"]),
        Route("/v1/projects/{project}/locations/{location}/endpoints/{rest}",
              _endpoint(server, vertex_public, "vertex", google_errors=True), methods=["POST"]),
        Route("/v1/endpoints/{endpoint}/deployedModels/{rest}",
              _endpoint(server, vertex_container, "vertex", google_errors=True), methods=["GET", "POST"]),
        Route("/monitoring/metrics", metrics_json),
        Route("/monitoring/prometheus/metrics", metrics_text),
    ]
    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found, 405: not_found})
    app.state.server = server
    return app
