"""TF Serving's gRPC ``tensorflow.serving.PredictionService``: Predict, Classify, Regress, GetModelMetadata.

Built from the official ``tensorflow-serving-api`` protos, so TF Serving's own client stubs work
unchanged (``PredictionServiceStub(channel).Predict(request)``). It runs on the REST server's event
loop and shares its batcher, so rows of gRPC and REST requests are batched together. Errors carry
TF Serving's status codes: INVALID_ARGUMENT, NOT_FOUND, RESOURCE_EXHAUSTED, UNAVAILABLE.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import numpy as np

from multiworker.errors import UserError
from multiworker.serve import codec, examples, tensor_proto
from multiworker.serve.limits import Limits
from multiworker.serve.signatures import (
    DEFAULT_SIGNATURE,
    BadRequest,
    NotFound,
    ServeError,
    SignatureInfo,
    TensorInfo,
    numpy_dtype,
)

__all__ = ["start_grpc", "server_options"]

log = logging.getLogger(__name__)


def _modules():
    try:
        import grpc
        from tensorflow_serving.apis import prediction_service_pb2_grpc
    except ImportError as exc:
        raise UserError("the gRPC API needs grpcio and tensorflow-serving-api: "
                        "`pip install 'multiworker[serve]'` (or give --grpc-port 0 for REST only)") from exc
    return grpc, prediction_service_pb2_grpc


def server_options(limits: Limits) -> list[tuple[str, Any]]:
    """Channel arguments bounding what clients may use: message size, connections, streams, idle time."""
    return [
        ("grpc.max_receive_message_length", limits.max_request_bytes),
        ("grpc.max_send_message_length", -1),
        ("grpc.max_concurrent_streams", 100),
        ("grpc.max_allowed_incoming_connections", limits.max_connections),
        ("grpc.max_connection_idle_ms", 300_000),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.so_reuseport", 0),
    ]


def _tensor_info_proto(info: TensorInfo):
    from tensorflow.core.framework import tensor_shape_pb2, types_pb2
    from tensorflow.core.protobuf import meta_graph_pb2

    shape = tensor_shape_pb2.TensorShapeProto(unknown_rank=info.shape is None)
    for size in info.shape or ():
        shape.dim.add(size=size)
    return meta_graph_pb2.TensorInfo(name=info.name, dtype=types_pb2.DataType.Value(info.dtype), tensor_shape=shape)


def _signature_def(sig: SignatureInfo):
    from tensorflow.core.protobuf import meta_graph_pb2

    proto = meta_graph_pb2.SignatureDef(method_name=sig.method_name)
    for name, info in sig.inputs.items():
        proto.inputs[name].CopyFrom(_tensor_info_proto(info))
    for name, info in sig.outputs.items():
        proto.outputs[name].CopyFrom(_tensor_info_proto(info))
    return proto


class _Service:
    """The servicer's logic, over the REST app's server object (model name, servable, batcher, metrics)."""

    def __init__(self, server):
        self.server = server

    def spec(self, model_spec) -> SignatureInfo:
        self.model(model_spec)
        name = model_spec.signature_name or DEFAULT_SIGNATURE
        signatures = self.server.servable.signatures
        if name not in signatures:
            raise NotFound(f"Serving signature name: \"{name[:200]}\" not found in signature def; "
                           f"the model has {sorted(signatures)}")
        return signatures[name]

    def model(self, model_spec) -> None:
        version = str(model_spec.version.value) if model_spec.HasField("version") else None
        self.server.check(model_spec.name, version, model_spec.version_label or None)

    def reply_spec(self, response, sig: SignatureInfo | None) -> None:
        response.model_spec.name = self.server.name
        response.model_spec.version.value = self.server.servable.version
        if sig is not None:
            response.model_spec.signature_name = sig.name

    def to_array(self, name: str, proto, info: TensorInfo) -> np.ndarray:
        from tensorflow.core.framework import types_pb2

        dtype = numpy_dtype(info.dtype)
        if proto.dtype != types_pb2.DataType.Value(info.dtype):
            raise BadRequest(f"input '{name}': expects a {info.dtype} tensor, got "
                             f"{types_pb2.DataType.Name(proto.dtype) if proto.dtype in types_pb2.DataType.values() else proto.dtype}")
        dims = [d.size for d in proto.tensor_shape.dim]
        if any(d < 0 for d in dims):
            raise BadRequest(f"input '{name}': tensor_shape {dims} has a negative dimension")
        itemsize = 8 if dtype is object else np.dtype(dtype).itemsize
        if math.prod(dims) * itemsize > self.server.limits.max_request_bytes:
            raise BadRequest(f"input '{name}': tensor_shape {dims} is larger than --max-request-size allows")
        try:
            array = tensor_proto.to_ndarray(proto)
        except (ValueError, TypeError) as exc:
            raise BadRequest(f"input '{name}': not a valid TensorProto: {str(exc)[:200]}") from None
        return codec.check_shape(name, array, info)

    async def predict(self, request, response) -> None:
        sig = self.spec(request.model_spec)
        missing = sorted(set(sig.inputs) - set(request.inputs))
        extra = sorted(set(request.inputs) - set(sig.inputs))
        if missing or extra:
            what = f"missing input(s) {missing}" if missing else f"unknown input(s) {extra}"
            raise BadRequest(f"{what}; signature '{sig.name}' takes {list(sig.inputs)}")
        inputs = {n: self.to_array(n, request.inputs[n], sig.inputs[n]) for n in sig.inputs}
        wanted = list(request.output_filter) or list(sig.outputs)
        unknown = sorted(set(wanted) - set(sig.outputs))
        if unknown:
            raise BadRequest(f"output_filter names unknown output(s) {unknown}; the signature has {list(sig.outputs)}")
        outputs = await self.server.batcher.submit(sig.name, inputs)
        for name in wanted:
            if name in outputs:
                tensor_proto.fill(response.outputs[name], outputs[name])
        self.reply_spec(response, sig)

    def serialized_examples(self, input_proto, sig: SignatureInfo, verb: str) -> tuple[dict[str, np.ndarray], int]:
        from tensorflow.core.example import example_pb2

        if sig.method_name != examples.METHODS[verb]:
            raise BadRequest(f"signature '{sig.name}' is a {sig.method_name} signature; {verb.title()} needs one "
                             f"whose method_name is {examples.METHODS[verb]} (use Predict for this one)")
        kind = input_proto.WhichOneof("kind")
        if kind is None:
            raise BadRequest("the request's input has no example_list or example_list_with_context")
        group = getattr(input_proto, kind)
        if not group.examples:
            raise BadRequest("the request's input has no examples")
        context = group.context.features.feature if kind == "example_list_with_context" else {}
        serialized = []
        for i, example in enumerate(group.examples):
            clash = sorted(set(example.features.feature) & set(context))
            if clash:
                raise BadRequest(f"examples[{i}]: feature(s) {clash} are also in the context; give each in one place")
            if context:
                merged = example_pb2.Example()
                merged.CopyFrom(example)
                for name, feature in context.items():
                    merged.features.feature[name].CopyFrom(feature)
                example = merged
            serialized.append(example.SerializeToString())
        (name,) = sig.inputs
        return {name: np.array(serialized, dtype=object)}, len(serialized)

    async def classify_or_regress(self, request, response, verb: str) -> None:
        sig = self.spec(request.model_spec)
        inputs, n = self.serialized_examples(request.input, sig, verb)
        result = examples.format_result(await self.server.batcher.submit(sig.name, inputs), verb, n)["result"]
        if verb == "regress":
            for value in result:
                response.result.regressions.add(value=value)
        else:
            for pairs in result:
                classes = response.result.classifications.add()
                for label, score in pairs:
                    if isinstance(label, dict):  # not UTF-8 (the proto's field is a string): its base64
                        label = label["b64"]
                    classes.classes.add(label=label, score=score)
        self.reply_spec(response, sig)

    async def metadata(self, request, response) -> None:
        from tensorflow_serving.apis import get_model_metadata_pb2

        self.model(request.model_spec)
        fields = list(request.metadata_field)
        if not fields:
            raise BadRequest("GetModelMetadataRequest must specify at least one metadata_field")
        unsupported = [f for f in fields if f != "signature_def"]
        if unsupported:
            raise BadRequest(f"Metadata field {unsupported[0][:100]} is not supported; ask for signature_def")
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        for name, sig in self.server.servable.signatures.items():
            signature_map.signature_def[name].CopyFrom(_signature_def(sig))
        response.metadata["signature_def"].Pack(signature_map)
        self.reply_spec(response, None)


def _servicer(service: _Service):
    grpc, pb2_grpc = _modules()
    from tensorflow_serving.apis import (
        classification_pb2,
        get_model_metadata_pb2,
        predict_pb2,
        regression_pb2,
    )

    async def answer(context, response, work) -> Any:
        started, status = time.monotonic(), 200
        error: tuple | None = None
        try:
            await work(response)
        except ServeError as exc:
            status, error = exc.http_status, (grpc.StatusCode[exc.grpc_status], str(exc))
        except RecursionError:
            status, error = 400, (grpc.StatusCode.INVALID_ARGUMENT, "the request nests too deeply")
        except Exception:  # noqa: BLE001 - one call's failure is INTERNAL, not a dead server
            log.exception("gRPC call failed")
            status, error = 500, (grpc.StatusCode.INTERNAL, "internal error; see the server's log")
        service.server.metrics.request("grpc", status, time.monotonic() - started)
        if error is not None:
            await context.abort(*error)
        return response

    class Servicer(pb2_grpc.PredictionServiceServicer):
        async def Predict(self, request, context):  # noqa: N802 - the proto's method names
            return await answer(context, predict_pb2.PredictResponse(), lambda r: service.predict(request, r))

        async def Classify(self, request, context):  # noqa: N802
            return await answer(context, classification_pb2.ClassificationResponse(),
                                lambda r: service.classify_or_regress(request, r, "classify"))

        async def Regress(self, request, context):  # noqa: N802
            return await answer(context, regression_pb2.RegressionResponse(),
                                lambda r: service.classify_or_regress(request, r, "regress"))

        async def GetModelMetadata(self, request, context):  # noqa: N802
            return await answer(context, get_model_metadata_pb2.GetModelMetadataResponse(),
                                lambda r: service.metadata(request, r))

    return Servicer()


async def start_grpc(server, host: str, port: int):
    """Start the PredictionService for the REST app's ``server`` on ``host:port``; returns the grpc.aio server."""
    grpc, pb2_grpc = _modules()
    limits: Limits = server.limits
    grpc_server = grpc.aio.server(options=server_options(limits), maximum_concurrent_rpcs=limits.max_connections)
    pb2_grpc.add_PredictionServiceServicer_to_server(_servicer(_Service(server)), grpc_server)
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        bound = grpc_server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        raise UserError(f"--grpc-port: {port} on {host} is not available; pick another port (or 0 for REST only)")
    await grpc_server.start()
    return grpc_server
