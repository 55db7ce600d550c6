"""TensorProto <-> numpy for the gRPC API's hot path.

A numeric tensor travels as ``tensor_content``, its raw little-endian bytes (what TF Serving's
clients send: ``tf.make_tensor_proto`` of a numpy array writes it so). Those are read and written
here straight from and to numpy; anything else (strings, the typed ``*_val`` fields, half floats)
goes through TensorFlow's general converters, which cost several times more per call.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from multiworker.serve.signatures import numpy_dtype

__all__ = ["to_ndarray", "fill"]

#: the JSON API's types whose tensor_content TensorFlow reads as the array's raw bytes (not strings;
#: float16 goes through TensorFlow, which writes it as half_val)
_RAW_TYPES = ("DT_FLOAT", "DT_DOUBLE", "DT_INT8", "DT_INT16", "DT_INT32", "DT_INT64", "DT_UINT8", "DT_UINT16",
              "DT_UINT32", "DT_UINT64", "DT_BOOL")


@functools.cache
def _tables() -> tuple[dict[int, np.dtype], dict[np.dtype, int]]:
    """(DataType value -> little-endian numpy dtype, and back), from the serving dtype vocabulary."""
    from tensorflow.core.framework import types_pb2

    numpy = {types_pb2.DataType.Value(name): np.dtype(numpy_dtype(name)).newbyteorder("<") for name in _RAW_TYPES}
    return numpy, {dtype: enum for enum, dtype in numpy.items()}


def to_ndarray(proto) -> np.ndarray:
    """The proto's value as an array (read-only when it is a view of the proto's bytes)."""
    dtype = _tables()[0].get(proto.dtype)
    content = proto.tensor_content
    if dtype is None or not content:
        import tensorflow as tf

        return tf.make_ndarray(proto)
    dims = [d.size for d in proto.tensor_shape.dim]
    if len(content) != math.prod(dims) * dtype.itemsize:
        raise ValueError(f"tensor_content has {len(content)} bytes; tensor_shape {dims} of "
                         f"{dtype.name} needs {math.prod(dims) * dtype.itemsize}")
    return np.frombuffer(content, dtype).reshape(dims)


def fill(proto, array: np.ndarray) -> None:
    """Write ``array`` into the (empty) TensorProto ``proto``."""
    array = np.asarray(array)
    if array.dtype.byteorder == ">":  # TensorFlow would write its bytes unswapped
        array = array.astype(array.dtype.newbyteorder("<"))
    enum = _tables()[1].get(array.dtype)
    if enum is None:
        import tensorflow as tf

        proto.CopyFrom(tf.make_tensor_proto(array))
        return
    proto.dtype = enum
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    proto.tensor_content = np.ascontiguousarray(array).tobytes()
