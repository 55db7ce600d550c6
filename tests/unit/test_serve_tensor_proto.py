"""gRPC tensors without TensorFlow's converters: the same arrays and protos as tf.make_ndarray / make_tensor_proto."""

from __future__ import annotations

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")

from multiworker.serve import tensor_proto  # noqa: E402

DTYPES = [np.float32, np.float64, np.int32, np.int64, np.uint8, np.int8, np.int16, np.uint16, np.uint32, np.uint64,
          np.bool_]


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_raw_tensors_match_tensorflows_converters(dtype):
    array = (np.random.default_rng(0).random((3, 4, 2)) * 100).astype(dtype)
    sent = tf.make_tensor_proto(array)  # what a TF Serving client sends: raw bytes (typed values for uint16/32)
    np.testing.assert_array_equal(tensor_proto.to_ndarray(sent), array)
    assert tensor_proto.to_ndarray(sent).dtype == array.dtype

    written = type(sent)()
    tensor_proto.fill(written, array)
    assert written == sent or not sent.tensor_content  # byte for byte what TensorFlow writes, where it writes bytes
    np.testing.assert_array_equal(tf.make_ndarray(written), array)


def test_other_encodings_go_through_tensorflow():
    from tensorflow.core.framework import tensor_pb2, types_pb2

    typed = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, float_val=[1.5, 2.5])  # typed values, no raw bytes
    typed.tensor_shape.dim.add(size=2)
    np.testing.assert_array_equal(tensor_proto.to_ndarray(typed), np.array([1.5, 2.5], np.float32))
    strings = tf.make_tensor_proto(np.array([b"a", b"bc"], dtype=object))
    assert tensor_proto.to_ndarray(strings).tolist() == [b"a", b"bc"]
    for array in (np.array([b"x"], dtype=object), np.arange(3, dtype=">f4"), np.arange(3, dtype=np.float16)):
        written = type(typed)()
        tensor_proto.fill(written, array)
        np.testing.assert_array_equal(tf.make_ndarray(written), array)


def test_content_of_the_wrong_length_is_refused():
    sent = tf.make_tensor_proto(np.zeros((4, 2), np.float32))
    sent.tensor_shape.dim[0].size = 5
    with pytest.raises(ValueError, match="needs 40"):
        tensor_proto.to_ndarray(sent)
