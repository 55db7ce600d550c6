"""What a served model looks like from outside, with no TensorFlow import: its signatures, the
errors the REST API maps to status codes, and the documents TF Serving returns for status and metadata."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

__all__ = [
    "ServeError", "BadRequest", "NotFound", "TooLarge", "TimedOut", "Unavailable",
    "TensorInfo", "SignatureInfo", "Servable",
    "PREDICT", "CLASSIFY", "REGRESS", "DEFAULT_SIGNATURE",
    "numpy_dtype", "status_doc", "metadata_doc",
]

PREDICT = "tensorflow/serving/predict"
CLASSIFY = "tensorflow/serving/classify"
REGRESS = "tensorflow/serving/regress"
DEFAULT_SIGNATURE = "serving_default"

# TensorFlow's DataType names (as in signature_def JSON) -> numpy; strings are object arrays of bytes.
_DTYPES = {
    "DT_FLOAT": np.float32, "DT_DOUBLE": np.float64, "DT_HALF": np.float16,
    "DT_INT8": np.int8, "DT_INT16": np.int16, "DT_INT32": np.int32, "DT_INT64": np.int64,
    "DT_UINT8": np.uint8, "DT_UINT16": np.uint16, "DT_UINT32": np.uint32, "DT_UINT64": np.uint64,
    "DT_BOOL": np.bool_, "DT_STRING": object,
}


class ServeError(Exception):
    """An error a prediction request gets back, with its HTTP status and gRPC-style status name."""

    http_status = 500
    grpc_status = "INTERNAL"


class BadRequest(ServeError):
    http_status = 400
    grpc_status = "INVALID_ARGUMENT"


class NotFound(ServeError):
    http_status = 404
    grpc_status = "NOT_FOUND"


class TooLarge(ServeError):
    http_status = 413
    grpc_status = "RESOURCE_EXHAUSTED"


class TimedOut(ServeError):
    http_status = 408
    grpc_status = "DEADLINE_EXCEEDED"


class Unavailable(ServeError):
    http_status = 503
    grpc_status = "UNAVAILABLE"


def numpy_dtype(dtype: str):
    """The numpy dtype for a ``DT_*`` name; BadRequest for types the JSON API cannot carry."""
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise BadRequest(f"tensors of type {dtype} cannot be given as JSON") from None


@dataclass(frozen=True)
class TensorInfo:
    """One input or output of a signature: its dtype (``DT_FLOAT``), shape (-1 unknown; None unknown rank)."""

    dtype: str
    shape: tuple[int, ...] | None
    name: str = ""

    def doc(self) -> dict:
        """TF Serving's JSON form of a TensorInfo proto."""
        shape: dict[str, Any] = {"unknown_rank": self.shape is None}
        if self.shape is not None:
            shape["dim"] = [{"size": str(d), "name": ""} for d in self.shape]
        return {"dtype": self.dtype, "tensor_shape": shape, "name": self.name}


@dataclass(frozen=True)
class SignatureInfo:
    name: str
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]
    method_name: str = PREDICT
    defaults: dict = field(default_factory=dict)

    def doc(self) -> dict:
        return {
            "inputs": {k: v.doc() for k, v in self.inputs.items()},
            "outputs": {k: v.doc() for k, v in self.outputs.items()},
            "method_name": self.method_name,
            "defaults": self.defaults,
        }


class Servable(Protocol):
    """A loaded model version: what the HTTP layer needs (``serve.model.SavedModelServable`` is the real one)."""

    version: int
    path: str
    load_seconds: float
    signatures: dict[str, SignatureInfo]

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Call one signature on a batch; BadRequest when TensorFlow rejects the inputs."""
        ...


def status_doc(servable: Servable) -> dict:
    """GetModelStatusResponse as TF Serving's REST API writes it."""
    return {"model_version_status": [{
        "version": str(servable.version), "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""},
    }]}


def metadata_doc(name: str, servable: Servable) -> dict:
    """GetModelMetadataResponse: the model spec and every signature_def."""
    return {
        "model_spec": {"name": name, "signature_name": "", "version": str(servable.version)},
        "metadata": {"signature_def": {
            "signature_def": {k: sig.doc() for k, sig in servable.signatures.items()},
        }},
    }
