"""TF Serving's JSON <-> tensors: the row (``instances``) and columnar (``inputs``) request formats,
``{"b64": ...}`` binary strings, and the ``predictions``/``outputs`` responses.

Follows https://www.tensorflow.org/tfx/serving/api_rest. One convenience beyond it: a value one
rank short of a signature input whose last dimension is 1 (a scalar feature for a Keras
``Input(shape=(1,))``) gets that axis added, as ``model.predict`` does.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import numpy as np

from multiworker.serve.signatures import (
    BadRequest,
    SignatureInfo,
    TensorInfo,
    numpy_dtype,
)

__all__ = ["parse_predict", "format_predict", "to_array", "check_shape", "to_json", "leading_rows", "is_b64",
           "decode_b64"]


def is_b64(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"b64"}


def decode_b64(value: dict) -> bytes:
    try:
        return base64.b64decode(value["b64"], validate=True)
    except (binascii.Error, TypeError, ValueError):
        raise BadRequest(f"{str(value['b64'])[:40]!r} is not valid base64 in a {{\"b64\": ...}} value") from None


def _to_bytes(value: Any) -> Any:
    if isinstance(value, list):
        return [_to_bytes(v) for v in value]
    if is_b64(value):
        return decode_b64(value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, (bytes, int, float, bool)):
        return str(value).encode() if not isinstance(value, bytes) else value
    raise BadRequest(f"expected a string or {{\"b64\": ...}}, got {type(value).__name__}")


def to_array(name: str, value: Any, info: TensorInfo) -> np.ndarray:
    """One input's JSON value as an array of the signature's dtype and (compatible) shape."""
    dtype = numpy_dtype(info.dtype)
    try:
        if dtype is object:
            array = np.array(_to_bytes(value), dtype=object)
        else:
            array = np.asarray(value)
            if array.dtype.kind in "OUS":
                raise BadRequest(f"input '{name}': expected numbers ({info.dtype}), got text, objects, "
                                 "lists of unequal length or integers beyond 64 bits")
            _check_integers(name, array, np.dtype(dtype), info.dtype)
            array = array.astype(dtype, copy=False)
    except RecursionError:
        raise BadRequest(f"input '{name}': nests lists too deeply") from None
    except (ValueError, TypeError, OverflowError) as exc:
        raise BadRequest(f"input '{name}': cannot make a {info.dtype} tensor: {exc}") from None
    return check_shape(name, array, info)


def _check_integers(name: str, array: np.ndarray, dtype: np.dtype, dtype_name: str) -> None:
    """BadRequest unless every value fits ``dtype`` exactly (a cast would wrap, truncate or saturate)."""
    if dtype.kind not in "iu" or array.dtype.kind == "b" or not array.size:
        return
    if array.dtype.kind == "f":
        if not np.isfinite(array).all() or not (array == np.trunc(array)).all():
            raise BadRequest(f"input '{name}': {dtype_name} takes whole numbers; got a fraction, NaN or Infinity")
    limits = np.iinfo(dtype)
    low, high = array.min().item(), array.max().item()  # Python numbers compare exactly
    if low < limits.min or high > limits.max:
        raise BadRequest(f"input '{name}': {high if high > limits.max else low} is outside {dtype_name}'s range "
                         f"[{limits.min}, {limits.max}]")


def check_shape(name: str, array: np.ndarray, info: TensorInfo) -> np.ndarray:
    """``array`` if its shape fits the signature's (a missing trailing axis of size 1 is added)."""
    shape = info.shape
    if shape is None:
        return array
    if array.ndim == len(shape) - 1 and shape and shape[-1] == 1:
        array = array[..., None]
    if array.ndim != len(shape) or any(want not in (-1, got) for want, got in zip(shape, array.shape)):
        want = "[" + ", ".join("?" if d == -1 else str(d) for d in shape) + "]"
        raise BadRequest(f"input '{name}': shape {list(array.shape)} does not match the signature's {want}")
    return array


def _named(value: Any) -> bool:
    """Whether a JSON object keys named inputs (rather than being a single input's b64 value)."""
    return isinstance(value, dict) and not is_b64(value)


def _rows_to_columns(instances: list, sig: SignatureInfo) -> dict[str, list]:
    names = list(sig.inputs)
    if len(names) == 1 and not all(_named(i) for i in instances):
        return {names[0]: instances}
    columns: dict[str, list] = {n: [] for n in names}
    for i, instance in enumerate(instances):
        if not _named(instance):
            raise BadRequest(f"instances[{i}]: signature '{sig.name}' has inputs {names}; give each instance "
                             "as an object with one value per input name")
        missing = [n for n in names if n not in instance]
        extra = sorted(set(instance) - set(names))
        if missing or extra:
            what = f"missing input(s) {missing}" if missing else f"unknown input(s) {extra}"
            raise BadRequest(f"instances[{i}]: {what}; signature '{sig.name}' takes {names}")
        for n in names:
            columns[n].append(instance[n])
    return columns


def parse_predict(body: Any, sig: SignatureInfo) -> tuple[dict[str, np.ndarray], str]:
    """(inputs, "row" or "column") from a predict request body."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object with \"instances\" or \"inputs\"")
    if ("instances" in body) == ("inputs" in body):
        raise BadRequest("give exactly one of \"instances\" (row format) or \"inputs\" (columnar format)")
    names = list(sig.inputs)
    if "instances" in body:
        instances = body["instances"]
        if not isinstance(instances, list) or not instances:
            raise BadRequest("\"instances\" must be a non-empty list")
        columns, fmt = _rows_to_columns(instances, sig), "row"
    else:
        value = body["inputs"]
        if _named(value) and (len(names) > 1 or set(value) <= set(names)):
            missing, extra = [n for n in names if n not in value], sorted(set(value) - set(names))
            if missing or extra:
                what = f"missing input(s) {missing}" if missing else f"unknown input(s) {extra}"
                raise BadRequest(f"\"inputs\": {what}; signature '{sig.name}' takes {names}")
            columns = dict(value)
        elif len(names) == 1:
            columns = {names[0]: value}
        else:
            raise BadRequest(f"\"inputs\" must be an object keyed by input name: signature '{sig.name}' takes {names}")
        fmt = "column"
    arrays = {n: to_array(n, columns[n], sig.inputs[n]) for n in names}
    if fmt == "row" and len({a.shape[0] for a in arrays.values() if a.ndim}) > 1:
        raise BadRequest("in the row format every input needs the same 0-th dimension; use \"inputs\"")
    return arrays, fmt


def to_json(name: str, array: np.ndarray) -> Any:
    """An output as JSON: strings as text, or ``{"b64": ...}`` when the name ends in ``_bytes`` or not UTF-8."""
    if array.dtype.kind in "OSU":
        binary = name.endswith("_bytes")

        def one(v):
            if isinstance(v, str):
                return v
            if not binary:
                try:
                    return v.decode()
                except UnicodeDecodeError:
                    pass
            return {"b64": base64.b64encode(v).decode()}

        return np.vectorize(one, otypes=[object])(array).tolist() if array.ndim else one(array.item())
    return array.tolist()


def format_predict(outputs: dict[str, np.ndarray], fmt: str) -> dict:
    """``{"predictions": ...}`` (row format) or ``{"outputs": ...}`` (columnar); a lone output loses its name."""
    names = sorted(outputs)
    if fmt == "column":
        if len(names) == 1:
            return {"outputs": to_json(names[0], outputs[names[0]])}
        return {"outputs": {n: to_json(n, outputs[n]) for n in names}}
    if len(names) == 1:
        return {"predictions": to_json(names[0], outputs[names[0]])}
    rows = {outputs[n].shape[0] if outputs[n].ndim else None for n in names}
    if len(rows) != 1 or None in rows:
        raise BadRequest("the outputs do not share a 0-th dimension, so they cannot be given per instance; "
                         "use the columnar format (\"inputs\")")
    columns = {n: to_json(n, outputs[n]) for n in names}
    return {"predictions": [{n: columns[n][i] for n in names} for i in range(rows.pop())]}


def leading_rows(inputs: dict[str, np.ndarray]) -> int | None:
    """The shared 0-th dimension of all inputs (what a batch concatenates along), or None."""
    sizes = {a.shape[0] if a.ndim else None for a in inputs.values()}
    if len(sizes) != 1 or None in sizes:
        return None
    return sizes.pop() or None
