"""TensorProto <-> numpy for the gRPC API's hot path.

A numeric tensor travels as ``tensor_content``, its raw little-endian bytes (what TF Serving's
clients send: ``tf.make_tensor_proto`` of a numpy array writes it so). Those are read and written
here straight from and to numpy; anything else (strings, the typed ``*_val`` fields, half floats)
goes through TensorFlow's general converters, which cost several times more per call.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["to_ndarray", "fill"]

#: DataType enum value -> numpy dtype, for the types whose tensor_content is the array's raw bytes
_RAW = {1: "<f4", 2: "<f8", 3: "<i4", 4: "u1", 5: "<i2", 6: "i1", 9: "<i8", 10: "?", 17: "<u2", 22: "<u4", 23: "<u8"}
_NUMPY = {k: np.dtype(v) for k, v in _RAW.items()}
_ENUM = {dtype: enum for enum, dtype in _NUMPY.items()}


def to_ndarray(proto) -> np.ndarray:
    """The proto's value as an array (read-only when it is a view of the proto's bytes)."""
    dtype = _NUMPY.get(proto.dtype)
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
    enum = _ENUM.get(array.dtype)
    if enum is None:
        import tensorflow as tf

        proto.CopyFrom(tf.make_tensor_proto(array))
        return
    proto.dtype = enum
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    proto.tensor_content = np.ascontiguousarray(array).tobytes()
