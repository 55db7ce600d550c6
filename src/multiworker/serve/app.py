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

import contextlib
import json
import logging
import re
import time
from typing import Any

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from multiworker.serve import codec, examples
from multiworker.serve.batching import Batcher, BatchOptions
from multiworker.serve.metrics import Metrics
from multiworker.serve.signatures import (
    DEFAULT_SIGNATURE,
    BadRequest,
    NotFound,
    Servable,
    ServeError,
    metadata_doc,
    status_doc,
)

__all__ = ["create_app"]

log = logging.getLogger(__name__)

_MODEL_PATH = re.compile(r"^(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+)|/labels/(?P<label>[^/:]+))?"
                         r"(?P<suffix>/metadata|:predict|:classify|:regress)?$")


class _JSON(Response):
    """JSON that keeps NaN and Infinity, as TF Serving writes them."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return json.dumps(content, allow_nan=True, separators=(",", ":")).encode()


def _tf_error(exc: ServeError) -> _JSON:
    return _JSON({"error": str(exc)}, status_code=exc.http_status)


def _google_error(exc: ServeError) -> _JSON:
    return _JSON({"error": {"code": exc.http_status, "message": str(exc), "status": exc.grpc_status}},
                 status_code=exc.http_status)


async def _body(request: Request) -> Any:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None


class _Server:
    def __init__(self, servable: Servable, name: str, options: BatchOptions, deployed_model_id: str):
        self.servable, self.name, self.deployed_model_id = servable, name, deployed_model_id
        self.metrics = Metrics(name, servable.version, servable.load_seconds, lambda: self.batcher.depth())
        self.batcher = Batcher(servable.run, options, self.metrics)

    def check(self, name: str, version: str | None = None, label: str | None = None) -> None:
        if name != self.name:
            raise NotFound(f"Servable not found for request: Latest({name}); this server serves '{self.name}'")
        if label is not None:
            raise NotFound(f"no version label '{label}' is configured; use /versions/{self.servable.version}")
        if version is not None:
            if not version.isdigit():
                raise BadRequest(f"version '{version}' is not a number")
            if int(version) != self.servable.version:
                raise NotFound(f"Servable not found for request: Specific({name}, {version}); "
                               f"version {self.servable.version} is loaded")

    def signature(self, body: Any):
        name = body.get("signature_name") if isinstance(body, dict) else None
        name = name or DEFAULT_SIGNATURE
        if name not in self.servable.signatures:
            raise NotFound(f"Serving signature name: \"{name}\" not found in signature def; "
                           f"the model has {sorted(self.servable.signatures)}")
        return self.servable.signatures[name]

    async def predict(self, body: Any) -> tuple[dict, str]:
        sig = self.signature(body)
        inputs, fmt = codec.parse_predict(body, sig)
        return codec.format_predict(await self.batcher.submit(sig.name, inputs), fmt), fmt

    async def tf_serving(self, request: Request) -> Response:
        match = _MODEL_PATH.match(request.path_params["rest"])
        suffix = match and match["suffix"]
        verb = suffix[1:] if suffix and suffix.startswith(":") else None
        if not match or (request.method == "GET") == bool(verb):
            raise NotFound(f"Malformed request: {request.method} {request.url.path}")
        self.check(match["name"], match["version"], match["label"])
        if suffix == "/metadata":
            return _JSON(metadata_doc(self.name, self.servable))
        if verb is None:
            return _JSON(status_doc(self.servable))
        body = await _body(request)
        if verb == "predict":
            return _JSON((await self.predict(body))[0])
        sig = self.signature(body)
        inputs = examples.parse_examples(body, sig, verb)
        outputs = await self.batcher.submit(sig.name, inputs)
        return _JSON(examples.format_result(outputs, verb, len(body["examples"])))

    async def vertex(self, request: Request) -> Response:
        params = request.path_params
        if request.method == "GET":
            return _JSON({"status": "healthy", "model": self.name, "version": str(self.servable.version)})
        if params.get("verb", "predict") != "predict":
            raise NotFound(f"':{params['verb']}' is not served; use ':predict'")
        body = await _body(request)
        if not isinstance(body, dict) or "instances" not in body:
            raise BadRequest("a Vertex AI prediction request is {\"instances\": [...], \"parameters\": {...}}")
        predictions = (await self.predict({"instances": body["instances"]}))[0]["predictions"]
        project, location = params.get("project", "local"), params.get("location", "local")
        return _JSON({
            "predictions": predictions,
            "deployedModelId": params.get("deployed_model") or self.deployed_model_id,
            "model": f"projects/{project}/locations/{location}/models/{self.name}",
            "modelDisplayName": self.name,
            "modelVersionId": str(self.servable.version),
        })


def _endpoint(server: _Server, handler, api: str, google_errors: bool = False):
    async def endpoint(request: Request) -> Response:
        started = time.monotonic()
        try:
            response = await handler(request)
        except ServeError as exc:
            response = _google_error(exc) if google_errors else _tf_error(exc)
        except Exception:  # noqa: BLE001 - one request's failure is a 500, not a dead server
            log.exception("%s %s failed", request.method, request.url.path)
            response = _JSON({"error": "internal error; see the server's log"}, status_code=500)
        server.metrics.request(api, response.status_code, time.monotonic() - started)
        return response
    return endpoint


def create_app(servable: Servable, *, name: str, options: BatchOptions | None = None,
               deployed_model_id: str | None = None) -> Starlette:
    """The ASGI app serving ``servable`` as model ``name``; batching runs inside its lifespan."""
    server = _Server(servable, name, options or BatchOptions(), deployed_model_id or name)

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
        message = f"Malformed request: {request.method} {request.url.path}"
        return _JSON({"error": message}, status_code=404 if exc.status_code == 404 else exc.status_code)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        await server.batcher.start()
        try:
            yield
        finally:
            await server.batcher.stop()

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
