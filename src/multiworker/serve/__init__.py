"""Serve an exported SavedModel over TF Serving's REST and gRPC APIs and Vertex AI's prediction shape.

``serve(target, ...)`` runs the server in the foreground; ``create_app(servable, name=...)`` is
the ASGI app (Starlette) for embedding or testing; ``load(path)`` loads a SavedModel version.
Starlette, uvicorn, grpcio and TensorFlow are imported only when used (extra ``serve``).
"""

from __future__ import annotations

from multiworker.serve.batching import BatchOptions
from multiworker.serve.limits import Limits
from multiworker.serve.signatures import (
    BadRequest,
    NotFound,
    ServeError,
    SignatureInfo,
    TensorInfo,
    Unavailable,
)

__all__ = [
    "BatchOptions", "Limits", "ServeError", "BadRequest", "NotFound", "Unavailable", "SignatureInfo", "TensorInfo",
    "create_app", "load", "locate", "serve",
]


def create_app(*args, **kwargs):
    from multiworker.serve.app import create_app as _create_app

    return _create_app(*args, **kwargs)


def load(*args, **kwargs):
    from multiworker.serve.model import load as _load

    return _load(*args, **kwargs)


def locate(*args, **kwargs):
    from multiworker.serve.model import locate as _locate

    return _locate(*args, **kwargs)


def serve(*args, **kwargs):
    from multiworker.serve.server import serve as _serve

    return _serve(*args, **kwargs)
