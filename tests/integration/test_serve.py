"""``multiworker serve`` on the examples' real models over real HTTP (uvicorn on free ports).

The MNIST and taxi-fare models are built from the examples' own model functions and saved
untrained (serving does not care how good they are); predictions over HTTP must equal
``model.predict`` on the same inputs.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")
pytest.importorskip("tensorflow")

from multiworker.job import Store  # noqa: E402
from multiworker.procs import free_ports  # noqa: E402

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TRIPS = {  # three taxi trips in the raw columns the trainer reads
    "pickup_datetime": ["2014-05-04 12:00:00 UTC", "2013-01-17 23:30:00 UTC", "2015-09-01 07:15:00 UTC"],
    "pickup_longitude": [-73.98, -73.87, -74.01], "pickup_latitude": [40.75, 40.77, 40.71],
    "dropoff_longitude": [-73.95, -73.99, -73.93], "dropoff_latitude": [40.78, 40.74, 40.80],
    "passenger_count": [1.0, 2.0, 4.0],
}


def _example_model(example: str):
    spec = importlib.util.spec_from_file_location(f"{example}_model", REPO / "examples" / example / "trainer" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _start(args: list[str], home: Path) -> subprocess.Popen:
    """``multiworker serve ARGS --json`` (gRPC on a free port); stderr goes to a file (a full pipe would block it)."""
    env = {**os.environ, "MULTIWORKER_HOME": str(home), "PYTHONPATH": str(REPO / "src")}
    log_path = home / f"serve-{args[2]}.log"
    (grpc_port,) = free_ports(1)
    with open(log_path, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "multiworker", "serve", *args, "--grpc-port", str(grpc_port),
                                 "--json"], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True)
    proc.log_path = log_path
    return proc


def _ready(proc: subprocess.Popen) -> dict:
    line = proc.stdout.readline()  # the JSON line printed once the socket listens
    if not line:
        pytest.fail(f"serve exited with {proc.wait()}: {proc.log_path.read_text()[-2000:]}")
    return json.loads(line)


def _tf1_classify_regress_model(path: Path) -> None:
    """A TF1-style SavedModel with classify and regress signatures over tf.Example, and a predict one."""
    import tensorflow as tf

    v1 = tf.compat.v1
    with tf.Graph().as_default() as graph, v1.Session(graph=graph) as session:
        serialized = v1.placeholder(tf.string, [None], name="tf_example")
        x = v1.io.parse_example(serialized, {"x": tf.io.FixedLenFeature([1], tf.float32)})["x"]
        scores = tf.concat([tf.sigmoid(x), 1.0 - tf.sigmoid(x)], axis=1)
        classes = tf.tile(tf.constant([["pos", "neg"]]), [tf.shape(x)[0], 1])
        x_in = v1.placeholder(tf.float32, [None, 1], name="x")
        builder = v1.saved_model.Builder(str(path))
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
            "regress_x": v1.saved_model.regression_signature_def(serialized, x * 0.5 + 3.0),
            "classify_x": v1.saved_model.classification_signature_def(serialized, classes, scores),
            "serving_default": v1.saved_model.predict_signature_def({"x": x_in}, {"y": x_in * 0.5 + 3.0}),
        })
        builder.save()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """MNIST served as a job (`serve JOB`), taxi-fare as a TF Serving base dir with version 7."""
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    root = tmp_path_factory.mktemp("serve")
    mnist = _example_model("mnist").build_model(1e-3, 100)
    mnist.save(str(root / "job-output" / "model"), save_format="tf")
    taxi = _example_model("taxifare").build_model()
    taxi.save(str(root / "taxi" / "7"), save_format="tf")
    home = root / "home"
    store = Store(home)
    store.create_job(job_id="20250101-000000-abcd", name="mnist", spec_json="{}", output_dir=str(root / "job-output"))
    store.update_job("20250101-000000-abcd", state="Succeeded")
    store.close()
    mnist_port, taxi_port = free_ports(2)
    procs = [
        _start(["20250101", "--port", str(mnist_port), "--batch-timeout", "20ms", "--read-timeout", "2"], home),
        _start([str(root / "taxi"), "--port", str(taxi_port), "--max-connections", "4", "--max-request-size", "64KB"],
               home),
    ]
    try:
        mnist_info, taxi_info = (_ready(p) for p in procs)
        yield {"mnist": mnist, "taxi": taxi, "procs": procs, "root": root, "home": home,
               "mnist_url": mnist_info["url"], "taxi_url": taxi_info["url"], "mnist_info": mnist_info,
               "taxi_info": taxi_info, "mnist_port": mnist_port}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


def test_job_and_version_resolved(served):
    assert served["mnist_info"]["model_path"] == str(served["root"] / "job-output" / "model")
    assert served["mnist_url"].endswith("/v1/models/mnist") and served["mnist_info"]["version"] == 1
    assert served["taxi_info"]["version"] == 7 and served["taxi_url"].endswith("/v1/models/taxi")
    assert httpx.get(served["taxi_url"]).json()["model_version_status"][0]["version"] == "7"


def test_mnist_predictions_equal_model_predict(served):
    images = np.random.default_rng(0).random((5, 28, 28, 1), dtype=np.float32)
    expected = served["mnist"].predict(images, verbose=0)
    rows = httpx.post(served["mnist_url"] + ":predict", json={"instances": images.tolist()}, timeout=60)
    cols = httpx.post(served["mnist_url"] + "/versions/1:predict", json={"inputs": images.tolist()}, timeout=60)
    np.testing.assert_allclose(np.array(rows.json()["predictions"]), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(cols.json()["outputs"]), expected, rtol=1e-4, atol=1e-5)


def test_taxifare_named_inputs_rows_columns_and_b64(served):
    features = {k: np.array(v, dtype=object if k == "pickup_datetime" else np.float32)[:, None] for k, v in TRIPS.items()}
    expected = served["taxi"].predict(features, verbose=0)
    instances = [{k: v[i] for k, v in TRIPS.items()} for i in range(3)]
    instances[1]["pickup_datetime"] = {"b64": base64.b64encode(TRIPS["pickup_datetime"][1].encode()).decode()}
    rows = httpx.post(served["taxi_url"] + ":predict", json={"instances": instances}, timeout=60).json()
    cols = httpx.post(served["taxi_url"] + ":predict", json={"inputs": TRIPS}, timeout=60).json()
    np.testing.assert_allclose(np.array(rows["predictions"]), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(np.array(cols["outputs"]), expected, rtol=1e-4, atol=1e-5)


def test_vertex_client_library_gets_predictions(served):
    from google.auth.credentials import AnonymousCredentials
    from google.cloud.aiplatform_v1.services.prediction_service import (
        PredictionServiceClient,
    )
    from google.cloud.aiplatform_v1.services.prediction_service.transports.rest import (
        PredictionServiceRestTransport,
    )

    transport = PredictionServiceRestTransport(host=f"127.0.0.1:{served['mnist_port']}",
                                               credentials=AnonymousCredentials(), url_scheme="http")
    client = PredictionServiceClient(transport=transport)
    images = np.random.default_rng(1).random((2, 28, 28, 1), dtype=np.float32)
    response = client.predict(endpoint="projects/p/locations/us-central1/endpoints/42",
                              instances=images.tolist(), parameters={"confidence": 0.5})
    np.testing.assert_allclose(np.array([list(p) for p in response.predictions]),
                               served["mnist"].predict(images, verbose=0), rtol=1e-4, atol=1e-5)
    assert response.deployed_model_id == "mnist" and response.model_version_id == "1"


def test_metadata_lists_signatures(served):
    meta = httpx.get(served["taxi_url"] + "/metadata").json()
    sig = meta["metadata"]["signature_def"]["signature_def"]["serving_default"]
    assert set(sig["inputs"]) == set(TRIPS) and sig["method_name"] == "tensorflow/serving/predict"
    assert sig["inputs"]["pickup_datetime"]["dtype"] == "DT_STRING" and set(sig["outputs"]) == {"fare"}


@pytest.mark.parametrize("path,body,status,words", [
    (":predict", {"instances": [{"pickup_longitude": 1.0}]}, 400, "missing input(s)"),
    (":predict", {"inputs": {**TRIPS, "passenger_count": ["two", "x", "y"]}}, 400, "expected numbers"),
    (":predict", {"signature_name": "nope", "inputs": TRIPS}, 404, "not found in signature def"),
    ("/versions/6:predict", {"inputs": TRIPS}, 404, "Specific(taxi, 6)"),
    (":regress", {"examples": [{"x": 1.0}]}, 400, "tensorflow/serving/regress"),
], ids=["missing", "type", "signature", "version", "not-regress"])
def test_bad_requests_get_tf_serving_errors(served, path, body, status, words):
    response = httpx.post(served["taxi_url"] + path, json=body, timeout=60)
    assert response.status_code == status and words in response.json()["error"], response.text
    unknown = httpx.post(served["taxi_url"].replace("/taxi", "/nope") + ":predict", json={"inputs": TRIPS})
    assert unknown.status_code == 404 and "Servable not found" in unknown.json()["error"]


def test_concurrent_requests_are_batched(served):
    images = np.random.default_rng(2).random((16, 28, 28, 1), dtype=np.float32)
    expected = served["mnist"].predict(images, verbose=0)

    def one(i: int):
        with httpx.Client(timeout=60) as client:
            return [client.post(served["mnist_url"] + ":predict", json={"instances": images[i:i + 1].tolist()}).json()
                    for _ in range(3)]

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(16)))
    for i, answers in enumerate(results):
        for answer in answers:
            np.testing.assert_allclose(answer["predictions"][0], expected[i], rtol=1e-4, atol=1e-5)
    metrics = httpx.get(served["mnist_url"].replace("/v1/models/mnist", "/monitoring/metrics")).json()
    assert metrics["requests_per_batch"]["max"] > 1, metrics["requests_per_batch"]
    assert metrics["batch_size"]["sum"] >= 48 and metrics["requests"]["total"] >= 48


@pytest.fixture(scope="module")
def tf1(tmp_path_factory):
    """The TF1 classify/regress/predict model served by a real `multiworker serve` process (REST and gRPC)."""
    root = tmp_path_factory.mktemp("tf1")
    _tf1_classify_regress_model(root / "half")
    (port,) = free_ports(1)
    proc = _start([str(root / "half"), "--port", str(port)], root)
    try:
        yield _ready(proc)
    finally:
        proc.terminate()
        proc.wait(60)


def test_classify_and_regress_signatures(tf1):
    url = tf1["url"]
    regress = httpx.post(url + ":regress", json={"signature_name": "regress_x", "examples": [{"x": 1.0}, {"x": 4.0}]})
    assert regress.json() == {"result": [3.5, 5.0]}, regress.text
    classify = httpx.post(url + ":classify", json={"signature_name": "classify_x", "examples": [{"x": 0.0}]})
    assert classify.json() == {"result": [[["pos", 0.5], ["neg", 0.5]]]}, classify.text
    clash = httpx.post(url + ":regress", json={"signature_name": "regress_x", "context": {"x": 1.0},
                                               "examples": [{"x": 2.0}]})
    assert clash.status_code == 400 and "also in \"context\"" in clash.json()["error"]
    wrong_type = httpx.post(url + ":regress", json={"signature_name": "regress_x", "examples": [{"x": 4}]})
    assert wrong_type.status_code == 400 and "Graph execution" not in wrong_type.json()["error"], wrong_type.text
    assert httpx.post(url + ":predict", json={"instances": [[2.0]]}).json() == {"predictions": [[4.0]]}


def _stub(address: str):
    grpc = pytest.importorskip("grpc")
    apis = pytest.importorskip("tensorflow_serving.apis.prediction_service_pb2_grpc")
    channel = grpc.insecure_channel(address)
    return grpc, apis.PredictionServiceStub(channel), channel


def test_grpc_classify_and_regress_with_tf_servings_client(tf1):
    from tensorflow_serving.apis import classification_pb2, regression_pb2

    grpc, stub, channel = _stub(tf1["grpc"])
    with channel:
        def examples(request, values, context=None):
            target = request.input.example_list_with_context if context else request.input.example_list
            for v in values:
                target.examples.add().features.feature["x"].float_list.value.append(v)
            if context:
                target.context.features.feature["y"].float_list.value.append(context)

        regress = regression_pb2.RegressionRequest()
        regress.model_spec.name, regress.model_spec.signature_name = "half", "regress_x"
        examples(regress, [1.0, 4.0], context=9.0)
        result = stub.Regress(regress, timeout=60)
        assert [r.value for r in result.result.regressions] == [3.5, 5.0] and result.model_spec.version.value == 1
        classify = classification_pb2.ClassificationRequest()
        classify.model_spec.name, classify.model_spec.signature_name = "half", "classify_x"
        examples(classify, [0.0])
        classes = stub.Classify(classify, timeout=60).result.classifications[0].classes
        assert [(c.label, c.score) for c in classes] == [("pos", 0.5), ("neg", 0.5)]
        regress.model_spec.signature_name = "serving_default"  # a predict signature
        with pytest.raises(grpc.RpcError) as err:
            stub.Regress(regress, timeout=60)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "tensorflow/serving/regress" in err.value.details()


def test_grpc_predict_and_metadata_with_tf_servings_client(served):
    import tensorflow as tf
    from tensorflow_serving.apis import get_model_metadata_pb2, predict_pb2

    grpc, stub, channel = _stub(served["mnist_info"]["grpc"])
    images = np.random.default_rng(3).random((40, 28, 28, 1), dtype=np.float32)
    expected = served["mnist"].predict(images, verbose=0)
    with channel:
        meta_request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        meta_request.model_spec.name = "mnist"
        meta = stub.GetModelMetadata(meta_request, timeout=60)
        signatures = get_model_metadata_pb2.SignatureDefMap()
        meta.metadata["signature_def"].Unpack(signatures)
        (input_name,) = signatures.signature_def["serving_default"].inputs
        assert [d.size for d in signatures.signature_def["serving_default"].inputs[input_name].tensor_shape.dim] == [
            -1, 28, 28, 1]

        request = predict_pb2.PredictRequest()
        request.model_spec.name = "mnist"
        request.inputs[input_name].CopyFrom(tf.make_tensor_proto(images))
        response = stub.Predict(request, timeout=60)
        (output,) = response.outputs.values()
        np.testing.assert_allclose(tf.make_ndarray(output), expected, rtol=1e-4, atol=1e-5)
        assert response.model_spec.name == "mnist" and response.model_spec.signature_name == "serving_default"

        def fails(mutate, code, words):
            bad = predict_pb2.PredictRequest()
            bad.CopyFrom(request)
            mutate(bad)
            with pytest.raises(grpc.RpcError) as err:
                stub.Predict(bad, timeout=60)
            assert err.value.code() == code and words in err.value.details(), err.value.details()

        fails(lambda r: r.model_spec.__setattr__("name", "other"), grpc.StatusCode.NOT_FOUND, "Servable not found")
        fails(lambda r: r.model_spec.version.__setattr__("value", 2), grpc.StatusCode.NOT_FOUND, "Specific(mnist, 2)")
        fails(lambda r: r.model_spec.__setattr__("signature_name", "nope"), grpc.StatusCode.NOT_FOUND, "nope")
        fails(lambda r: r.inputs[input_name].CopyFrom(tf.make_tensor_proto(images.astype(np.int32))),
              grpc.StatusCode.INVALID_ARGUMENT, "expects a DT_FLOAT tensor")
        fails(lambda r: r.inputs[input_name].CopyFrom(tf.make_tensor_proto(images[:, :20])),
              grpc.StatusCode.INVALID_ARGUMENT, "does not match")
        fails(lambda r: r.inputs[input_name].tensor_shape.dim[0].__setattr__("size", 10 ** 12),
              grpc.StatusCode.INVALID_ARGUMENT, "larger than --max-request-size")
        fails(lambda r: r.inputs[input_name].tensor_shape.dim[0].__setattr__("size", 41),
              grpc.StatusCode.INVALID_ARGUMENT, "not a valid TensorProto")
        fails(lambda r: r.inputs["extra"].CopyFrom(tf.make_tensor_proto([1.0])),
              grpc.StatusCode.INVALID_ARGUMENT, "unknown input(s) ['extra']")
    metrics = httpx.get(served["mnist_url"].replace("/v1/models/mnist", "/monitoring/metrics")).json()
    assert metrics["batch_size"]["max"] <= 32  # 40 rows ran as calls of at most --max-batch-size


def test_silent_connection_is_closed_after_the_read_timeout(served):
    import socket

    with socket.create_connection(("127.0.0.1", served["mnist_port"]), timeout=120) as sock:
        sock.sendall(b"POST /v1/models/mnist:predict HTTP/1.1\r\nHost: x\r\n")  # a head that never ends
        assert sock.recv(1024) == b""  # closed by the server (after --read-timeout 2), not by our 120 s


def test_connections_over_the_cap_get_503_and_big_bodies_413(served):
    import socket

    taxi_port = int(served["taxi_url"].split(":")[2].split("/")[0])
    too_big = httpx.post(served["taxi_url"] + ":predict", json={"inputs": {**TRIPS, "pad": ["x" * 70_000]}}, timeout=60)
    assert too_big.status_code == 413 and "--max-request-size" in too_big.json()["error"]
    idle = [socket.create_connection(("127.0.0.1", taxi_port), timeout=60) for _ in range(4)]  # --max-connections 4
    try:
        refused = httpx.get(served["taxi_url"], timeout=60)
        assert refused.status_code == 503, refused.text
    finally:
        for sock in idle:
            sock.close()
    for _ in range(600):  # the server notices the closed connections
        if httpx.get(served["taxi_url"], timeout=60).status_code == 200:
            break
        threading.Event().wait(0.1)
    else:
        pytest.fail("the server kept refusing after the idle connections closed")


@pytest.mark.parametrize("path,body,status,words", [
    (":predict", b'{"instances": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", 400, "not valid JSON"),
    (":predict", b'{"instances": [' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"]}", 400, "not valid JSON"),
    (":predict", b'{"signature_name": ["serving_default"], "instances": [1]}', 400, "must be a string"),
    (":predict", b'{"signature_name": {"a": 1}, "instances": [1]}', 400, "must be a string"),
    ("/versions/" + "1" * 5000 + ":predict", b'{"instances": [1]}', 404, "Servable not found"),
], ids=["deep-arrays", "deep-objects", "signature-list", "signature-object", "version-5000-digits"])
def test_hostile_requests_get_400_or_404_from_the_real_server(served, path, body, status, words):
    response = httpx.post(served["mnist_url"] + path, content=body, timeout=60,
                          headers={"content-type": "application/json"})
    assert response.status_code == status and words in response.json()["error"], response.text[:300]


def test_sigterm_stops_cleanly(served):
    proc = served["procs"][1]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(served["taxi_url"], timeout=5)
