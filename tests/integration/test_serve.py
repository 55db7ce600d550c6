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
    """``multiworker serve ARGS --json``; its stderr goes to a file (a full pipe would block the server)."""
    env = {**os.environ, "MULTIWORKER_HOME": str(home), "PYTHONPATH": str(REPO / "src")}
    log_path = home / f"serve-{args[2]}.log"
    with open(log_path, "w") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "multiworker", "serve", *args, "--json"], env=env,
                                stdout=subprocess.PIPE, stderr=stderr, text=True)
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
        _start(["20250101", "--port", str(mnist_port), "--batch-timeout", "20ms"], home),
        _start([str(root / "taxi"), "--port", str(taxi_port)], home),
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


def test_classify_and_regress_signatures(tmp_path):
    import uvicorn

    from multiworker.serve import create_app, load

    _tf1_classify_regress_model(tmp_path / "m")
    (port,) = free_ports(1)
    server = uvicorn.Server(uvicorn.Config(create_app(load(tmp_path / "m"), name="half"), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.05)
        url = f"http://127.0.0.1:{port}/v1/models/half"
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
    finally:
        server.should_exit = True
        thread.join(30)


def test_sigterm_stops_cleanly(served):
    proc = served["procs"][1]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    with pytest.raises(httpx.ConnectError):
        httpx.get(served["taxi_url"], timeout=5)
