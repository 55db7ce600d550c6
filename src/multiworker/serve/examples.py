"""``:classify`` and ``:regress``: JSON examples (+ shared context) -> serialized tf.train.Example
for a classify/regress signature, and its outputs -> TF Serving's ``{"result": ...}``."""

from __future__ import annotations

from typing import Any

import numpy as np

from multiworker.serve.codec import decode_b64, is_b64, to_json
from multiworker.serve.signatures import CLASSIFY, REGRESS, BadRequest, SignatureInfo

__all__ = ["parse_examples", "format_result", "METHODS"]

METHODS = {"classify": CLASSIFY, "regress": REGRESS}


def _feature(name: str, value: Any):
    from tensorflow.core.example import feature_pb2

    values = value if isinstance(value, list) else [value]
    if not values:
        return feature_pb2.Feature()
    if all(isinstance(v, (str, dict)) for v in values):
        data = [decode_b64(v) if is_b64(v) else (v.encode() if isinstance(v, str) else None) for v in values]
        if None in data:
            raise BadRequest(f"feature '{name}': give strings or {{\"b64\": ...}} values")
        return feature_pb2.Feature(bytes_list=feature_pb2.BytesList(value=data))
    if all(isinstance(v, bool) or isinstance(v, int) for v in values):
        return feature_pb2.Feature(int64_list=feature_pb2.Int64List(value=[int(v) for v in values]))
    if all(isinstance(v, (int, float)) for v in values):
        return feature_pb2.Feature(float_list=feature_pb2.FloatList(value=[float(v) for v in values]))
    raise BadRequest(f"feature '{name}': a value is a number, a string, {{\"b64\": ...}} or a list of one kind")


def parse_examples(body: Any, sig: SignatureInfo, verb: str) -> dict[str, np.ndarray]:
    """The signature's one string input: the request's examples, serialized, each merged with ``context``."""
    from tensorflow.core.example import example_pb2

    if sig.method_name != METHODS[verb]:
        raise BadRequest(f"signature '{sig.name}' is a {sig.method_name} signature; :{verb} needs one whose "
                         f"method_name is {METHODS[verb]} (use :predict for this one)")
    if not isinstance(body, dict) or not isinstance(body.get("examples"), list) or not body["examples"]:
        raise BadRequest(f":{verb} takes {{\"examples\": [{{feature: value, ...}}, ...]}} (and optional \"context\")")
    context = body.get("context") or {}
    if not isinstance(context, dict):
        raise BadRequest("\"context\" must be an object of features shared by every example")
    serialized = []
    for i, example in enumerate(body["examples"]):
        if not isinstance(example, dict):
            raise BadRequest(f"examples[{i}]: must be an object of features")
        clash = sorted(set(example) & set(context))
        if clash:
            raise BadRequest(f"examples[{i}]: feature(s) {clash} are also in \"context\"; give each in one place")
        proto = example_pb2.Example()
        for name, value in {**context, **example}.items():
            proto.features.feature[name].CopyFrom(_feature(name, value))
        serialized.append(proto.SerializeToString())
    (name,) = sig.inputs
    return {name: np.array(serialized, dtype=object)}


def format_result(outputs: dict[str, np.ndarray], verb: str, n: int) -> dict:
    """``{"result": [[[label, score], ...], ...]}`` for classify, ``{"result": [value, ...]}`` for regress."""
    if verb == "regress":
        values = outputs.get("outputs", next(iter(outputs.values())))
        return {"result": np.asarray(values, dtype=np.float64).reshape(n, -1)[:, 0].tolist()}
    scores, classes = outputs.get("scores"), outputs.get("classes")
    if scores is None and classes is None:
        raise BadRequest("the classify signature has neither a 'classes' nor a 'scores' output")
    width = (scores if scores is not None else classes).reshape(n, -1).shape[1]
    labels = to_json("classes", classes.reshape(n, -1)) if classes is not None else [[""] * width] * n
    values = scores.reshape(n, -1).astype(np.float64).tolist() if scores is not None else [[0.0] * width] * n
    return {"result": [[[lab, val] for lab, val in zip(labs, vals)] for labs, vals in zip(labels, values)]}
