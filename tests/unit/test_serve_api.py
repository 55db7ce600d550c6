"""The serving API over a fake model (numpy, no TensorFlow): formats, errors, Vertex shape, batching."""

from __future__ import annotations

import asyncio
import base64
import threading
import time

import numpy as np
import pytest
from starlette.testclient import TestClient

from multiworker.serve import (
    BadRequest,
    BatchOptions,
    SignatureInfo,
    TensorInfo,
    create_app,
)
from multiworker.serve.batching import Batcher
from multiworker.serve.decode import Decoder, SpooledBody
from multiworker.serve.limits import Limits


class FakeModel:
    """Two signatures: serving_default(a: float[?,2], s: string[?]) -> sum, echo_bytes; one(x: float[?,1]) -> y."""

    version = 3
    path = "/fake"
    load_seconds = 0.1

    def __init__(self, gate: threading.Event | None = None):
        self.calls: list[tuple[str, int]] = []
        self.gate = gate
        self.signatures = {
            "serving_default": SignatureInfo(
                "serving_default",
                inputs={"a": TensorInfo("DT_FLOAT", (-1, 2)), "s": TensorInfo("DT_STRING", (-1,))},
                outputs={"sum": TensorInfo("DT_FLOAT", (-1,)), "echo_bytes": TensorInfo("DT_STRING", (-1,))}),
            "one": SignatureInfo("one", inputs={"x": TensorInfo("DT_FLOAT", (-1, 1))},
                                 outputs={"y": TensorInfo("DT_FLOAT", (-1, 1))}),
            "ints": SignatureInfo("ints", inputs={"i": TensorInfo("DT_INT32", (-1,))},
                                  outputs={"j": TensorInfo("DT_INT32", (-1,))}),
        }

    def run(self, signature, inputs):
        if self.gate:
            self.gate.wait(10)
        if signature == "ints":
            self.calls.append((signature, len(inputs["i"])))
            return {"j": inputs["i"] + 1}
        if signature == "one":
            if np.any(inputs["x"] < 0):
                raise BadRequest("negative input")
            self.calls.append((signature, len(inputs["x"])))
            return {"y": inputs["x"] * 2}
        self.calls.append((signature, len(inputs["a"])))
        return {"sum": inputs["a"].sum(axis=1), "echo_bytes": inputs["s"]}


@pytest.fixture
def client():
    with TestClient(create_app(FakeModel(), name="m")) as c:
        yield c


def test_row_and_columnar_formats_with_b64_and_named_outputs(client):
    raw = b"\xff\x00bin"
    rows = client.post("/v1/models/m:predict", json={"instances": [
        {"a": [1, 2], "s": "hi"}, {"a": [3, 4.5], "s": {"b64": base64.b64encode(raw).decode()}}]})
    assert rows.status_code == 200, rows.text
    assert rows.json() == {"predictions": [
        {"sum": 3.0, "echo_bytes": {"b64": base64.b64encode(b"hi").decode()}},
        {"sum": 7.5, "echo_bytes": {"b64": base64.b64encode(raw).decode()}}]}
    cols = client.post("/v1/models/m/versions/3:predict", json={"inputs": {"a": [[1, 2], [3, 4.5]], "s": ["x", "y"]}})
    assert cols.json() == {"outputs": {"sum": [3.0, 7.5], "echo_bytes": [{"b64": "eA=="}, {"b64": "eQ=="}]}}


@pytest.mark.parametrize("body", [
    {"signature_name": "one", "instances": [[1.0], [2.0]]},
    {"signature_name": "one", "instances": [1.0, 2.0]},          # a scalar for an Input(shape=(1,))
    {"signature_name": "one", "instances": [{"x": [1.0]}, {"x": [2.0]}]},
], ids=["lists", "scalars", "named"])
def test_single_input_rows(client, body):
    response = client.post("/v1/models/m:predict", json=body)
    assert response.json() == {"predictions": [[2.0], [4.0]]}
    assert client.post("/v1/models/m:predict", json={"signature_name": "one", "inputs": [[1.5]]}).json() == {
        "outputs": [[3.0]]}


@pytest.mark.parametrize("method,path,body,status,words", [
    ("POST", "/v1/models/m:predict", b"{not json", 400, "not valid JSON"),
    ("POST", "/v1/models/m:predict", {"instances": [], "inputs": {}}, 400, "exactly one"),
    ("POST", "/v1/models/m:predict", {"instances": [{"a": [1, 2]}]}, 400, "missing input(s) ['s']"),
    ("POST", "/v1/models/m:predict", {"instances": [{"a": [1, 2, 3], "s": "x"}]}, 400, "does not match"),
    ("POST", "/v1/models/m:predict", {"instances": [{"a": ["x", 2], "s": "x"}]}, 400, "expected numbers"),
    ("POST", "/v1/models/m:predict", {"signature_name": "one", "instances": [[-1.0]]}, 400, "negative input"),
    ("POST", "/v1/models/m:predict", {"signature_name": "nope", "instances": [1]}, 404, "not found in signature def"),
    ("POST", "/v1/models/other:predict", {"instances": [1]}, 404, "Servable not found"),
    ("GET", "/v1/models/other", None, 404, "Servable not found"),
    ("GET", "/v1/models/m/versions/2", None, 404, "Specific(m, 2)"),
    ("POST", "/v1/models/m:explain", {}, 404, "Malformed request"),
    ("GET", "/v2/nothing", None, 404, "Malformed request"),
], ids=["json", "both", "missing", "shape", "text", "model-error", "signature", "model", "status", "version",
        "verb", "path"])
def test_errors_have_tf_serving_shape(client, method, path, body, status, words):
    kwargs = {"content": body} if isinstance(body, bytes) else ({"json": body} if body is not None else {})
    response = client.request(method, path, **kwargs)
    assert response.status_code == status
    assert set(response.json()) == {"error"} and words in response.json()["error"]


def test_status_metadata_and_vertex_shapes(client):
    assert client.get("/v1/models/m").json()["model_version_status"][0] == {
        "version": "3", "state": "AVAILABLE", "status": {"error_code": "OK", "error_message": ""}}
    meta = client.get("/v1/models/m/metadata").json()
    assert meta["model_spec"] == {"name": "m", "signature_name": "", "version": "3"}
    sigs = meta["metadata"]["signature_def"]["signature_def"]
    assert set(sigs) == {"serving_default", "one", "ints"} and sigs["one"]["method_name"] == "tensorflow/serving/predict"
    assert sigs["one"]["inputs"]["x"]["tensor_shape"]["dim"] == [{"size": "-1", "name": ""}, {"size": "1", "name": ""}]
    body = {"instances": [{"a": [1, 1], "s": "q"}], "parameters": {"k": 1}}
    public = client.post("/v1/projects/p/locations/us-central1/endpoints/123:predict", json=body).json()
    assert public["predictions"][0]["sum"] == 2.0 and public["deployedModelId"] == "m"
    assert public["model"] == "projects/p/locations/us-central1/models/m" and public["modelVersionId"] == "3"
    container = client.post("/v1/endpoints/123/deployedModels/456:predict", json=body).json()
    assert container["deployedModelId"] == "456" and container["predictions"] == public["predictions"]
    assert client.get("/v1/endpoints/123/deployedModels/456").status_code == 200
    bad = client.post("/v1/projects/p/locations/l/endpoints/1:predict", json={"instances": [{"a": [1]}]})
    assert bad.status_code == 400 and bad.json()["error"]["status"] == "INVALID_ARGUMENT"
    metrics = client.get("/monitoring/metrics").json()
    assert metrics["requests"]["total"] >= 5 and metrics["requests"]["errors"] == 1
    assert "multiworker_serve_requests_total" in client.get("/monitoring/prometheus/metrics").text


def test_full_queue_gets_503():
    gate = threading.Event()
    model = FakeModel(gate)
    app = create_app(model, name="m", options=BatchOptions(max_batch_size=1, max_queue=1, threads=1))
    body = {"signature_name": "one", "instances": [[1.0]]}
    with TestClient(app) as client:
        results: list = []
        threads = [threading.Thread(target=lambda: results.append(client.post("/v1/models/m:predict", json=body)))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for _ in range(200):  # one call runs (blocked), one waits in the queue, the others are refused
            if sum(r.status_code == 503 for r in results) >= 2:
                break
            threading.Event().wait(0.05)
        gate.set()
        for t in threads:
            t.join(10)
    codes = sorted(r.status_code for r in results)
    assert codes == [200, 200, 503, 503], [r.text for r in results]
    refused = next(r for r in results if r.status_code == 503)
    assert "queue is full" in refused.json()["error"]


def test_batcher_merges_splits_and_isolates_failures():
    model = FakeModel()

    async def main():
        batcher = Batcher(model.run, BatchOptions(max_batch_size=8, timeout=0.2))
        await batcher.start()

        def submit(values):
            return asyncio.gather(*(batcher.submit("one", {"x": np.array([[v]], dtype=np.float32)}) for v in values),
                                  return_exceptions=True)
        try:
            return await submit(range(5)), await submit([1.0, -1.0, 2.0])
        finally:
            await batcher.stop()

    merged, mixed = asyncio.run(main())
    assert [r["y"].tolist() for r in merged] == [[[2.0 * i]] for i in range(5)]
    assert model.calls[0] == ("one", 5)  # five requests, one model call, outputs split back
    assert mixed[0]["y"].tolist() == [[2.0]] and mixed[2]["y"].tolist() == [[4.0]]
    assert isinstance(mixed[1], BadRequest)  # the merged call failed; retried alone, only the bad one fails
    assert model.calls[1:] == [("one", 1), ("one", 1)]


def test_no_batching_runs_each_request_alone():
    model = FakeModel()

    async def main():
        batcher = Batcher(model.run, BatchOptions(enabled=False))
        await batcher.start()
        try:
            return await asyncio.gather(*(batcher.submit("one", {"x": np.ones((1, 1), np.float32)}) for _ in range(4)))
        finally:
            await batcher.stop()

    assert len(asyncio.run(main())) == 4 and [n for _, n in model.calls] == [1, 1, 1, 1]


def test_lone_request_does_not_wait_out_the_batch_timeout():
    """Regression: a request with nothing else queued ran only after --batch-timeout (p50 9 ms vs 3 ms at 1 client)."""
    model = FakeModel()

    async def main():
        batcher = Batcher(model.run, BatchOptions(max_batch_size=3, timeout=2.0))
        await batcher.start()
        try:
            started = time.monotonic()
            await batcher.submit("one", {"x": np.ones((1, 1), np.float32)})
            lone = time.monotonic() - started
            together = await asyncio.gather(*(batcher.submit("one", {"x": np.ones((1, 1), np.float32)})
                                              for _ in range(3)))
            return lone, together
        finally:
            await batcher.stop()

    lone, together = asyncio.run(main())
    assert lone < 1.0, f"a lone request took {lone:.2f}s: it waited for the 2 s batch timeout"
    assert len(together) == 3 and model.calls[1] == ("one", 3)  # queued together: still one call


def test_model_calls_run_side_by_side_and_a_split_request_is_joined_in_row_order():
    """Two call slots: the calls for a request's two halves overlap, and the second half may finish first."""
    both_running = threading.Barrier(2, timeout=30)  # broken (an error) unless two calls run at once
    second_done = threading.Event()

    def run(signature, inputs):
        both_running.wait()
        if inputs["x"][0, 0] == 0.0:  # the first half waits for the second to finish
            assert second_done.wait(30)
        else:
            second_done.set()
        return {"y": inputs["x"] * 2}

    async def main():
        batcher = Batcher(run, BatchOptions(max_batch_size=2, threads=2))
        await batcher.start()
        try:
            return await batcher.submit("one", {"x": np.arange(4, dtype=np.float32)[:, None]})
        finally:
            await batcher.stop()

    assert asyncio.run(main())["y"][:, 0].tolist() == [0.0, 2.0, 4.0, 6.0]


def test_queued_requests_run_together_without_waiting_by_default():
    """Timeout 0: what queued while a call ran is the next batch, taken at once."""
    entered, gate, calls = threading.Event(), threading.Event(), []

    def run(signature, inputs):
        entered.set()
        assert gate.wait(30)
        calls.append(len(inputs["x"]))
        return {"y": inputs["x"] * 2}

    async def main():
        batcher = Batcher(run, BatchOptions(max_batch_size=8, threads=1))
        await batcher.start()
        try:
            first = asyncio.ensure_future(batcher.submit("one", {"x": np.ones((1, 1), np.float32)}))
            assert await asyncio.to_thread(entered.wait, 30)  # the first call is in the model
            rest = [asyncio.ensure_future(batcher.submit("one", {"x": np.full((1, 1), v, np.float32)}))
                    for v in range(2, 6)]
            while batcher.depth() < 4:  # all four queued behind it
                await asyncio.sleep(0)
            gate.set()
            return await asyncio.gather(first, *rest)
        finally:
            await batcher.stop()

    outputs = asyncio.run(main())
    assert [o["y"][0, 0] for o in outputs] == [2.0, 4.0, 6.0, 8.0, 10.0]
    assert calls == [1, 4]


_DEEP = 100_000


@pytest.mark.parametrize("path,body,status,words", [
    (":predict", b'{"instances": ' + b"[" * _DEEP + b"]" * _DEEP + b"}", 400, "not valid JSON"),
    (":predict", b'{"instances": [' + b'{"a":' * _DEEP + b"1" + b"}" * _DEEP + b"]}", 400, "not valid JSON"),
    (":predict", {"signature_name": ["one"], "instances": [[1.0]]}, 400, "must be a string, not list"),
    (":predict", {"signature_name": {"a": 1}, "instances": [[1.0]]}, 400, "must be a string, not dict"),
    (":classify", {"signature_name": ["one"], "examples": [{"x": 1}]}, 400, "must be a string"),
    ("/versions/" + "7" * 5000 + ":predict", {"instances": [[1.0]]}, 404, "Specific(m, 77777"),
    ("/versions/" + "0" * 4999 + "3:predict", {"signature_name": "one", "instances": [[1.0]]}, 200, ""),
    ("/versions/\u0663:predict", {"instances": [[1.0]]}, 400, "not a number"),  # an Arabic-Indic 3
    (":predict", {"signature_name": "ints", "instances": [2 ** 40]}, 400, "outside DT_INT32's range"),
    (":predict", {"signature_name": "ints", "instances": [1, 2 ** 80]}, 400, "outside DT_INT32's range"),
    (":predict", {"signature_name": "ints", "instances": [1.7]}, 400, "whole numbers"),
    (":predict", {"signature_name": "ints", "instances": [1e30]}, 400, "outside DT_INT32's range"),
    (":predict", {"signature_name": "ints", "instances": [-(2 ** 31) - 1]}, 400, "outside DT_INT32's range"),
    (":predict", b'{"signature_name": "ints", "instances": [NaN]}', 400, "whole numbers"),
    (":predict", b'{"signature_name": "ints", "instances": [' + b"9" * 5000 + b"]}", 400, "not valid JSON"),
], ids=["deep-arrays", "deep-objects", "signature-list", "signature-object", "classify-signature-list",
        "version-5000-digits", "version-leading-zeros", "version-unicode-digit", "int32-2**40", "int32-2**80",
        "int32-fraction", "int32-1e30", "int32-below-min", "int32-nan", "int-5000-digits"])
def test_hostile_inputs_get_400_or_404(client, path, body, status, words):
    kwargs = {"content": body} if isinstance(body, bytes) else {"json": body}
    response = client.post("/v1/models/m" + path, **kwargs)
    assert response.status_code == status, response.text[:300]
    if status != 200:
        assert set(response.json()) == {"error"} and words in response.json()["error"], response.text[:300]


def test_integers_in_range_are_exact(client):
    body = {"signature_name": "ints", "instances": [2 ** 31 - 1 - 1, -(2 ** 31), 3.0]}
    assert client.post("/v1/models/m:predict", json=body).json() == {"predictions": [2 ** 31 - 1, -(2 ** 31) + 1, 4]}


def test_nan_and_infinity_survive_both_ways(client):
    response = client.post("/v1/models/m:predict", content=b'{"signature_name": "one", "instances": [[NaN], [1.0]]}')
    assert response.status_code == 200 and response.text == '{"predictions":[[NaN],[2.0]]}'


def test_body_over_the_cap_gets_413_without_being_read():
    with TestClient(create_app(FakeModel(), name="m", limits=Limits(max_request_bytes=4096))) as client:
        big = {"signature_name": "one", "instances": [[1.0]] * 2000}
        response = client.post("/v1/models/m:predict", json=big)
        assert response.status_code == 413 and "--max-request-size" in response.json()["error"]
        vertex = client.post("/v1/endpoints/1/deployedModels/2:predict", json={"instances": [[1.0]] * 2000})
        assert vertex.status_code == 413 and vertex.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
        chunked = client.post("/v1/models/m:predict", content=iter([b'{"instances": [', b"[1.0]," * 1000, b"[1.0]]}"]))
        assert chunked.status_code == 413, chunked.text  # no Content-Length: counted as it arrives
        small = client.post("/v1/models/m:predict", json={"signature_name": "one", "instances": [[1.0]]})
        assert small.json() == {"predictions": [[2.0]]}


def test_large_request_runs_as_calls_of_at_most_max_batch_size():
    model = FakeModel()
    with TestClient(create_app(model, name="m", options=BatchOptions(max_batch_size=8))) as client:
        response = client.post("/v1/models/m:predict", json={"signature_name": "one",
                                                              "instances": [[float(i)] for i in range(100)]})
    assert response.json() == {"predictions": [[2.0 * i] for i in range(100)]}
    assert sorted(n for _, n in model.calls) == [4] + [8] * 12


def test_split_request_shares_calls_with_concurrent_requests():
    """Rows of concurrent requests fill the same calls; a long request's rest waits behind newer requests."""
    model = FakeModel()

    async def main():
        batcher = Batcher(model.run, BatchOptions(max_batch_size=8, timeout=0.5))
        await batcher.start()
        try:
            big = batcher.submit("one", {"x": np.arange(20, dtype=np.float32)[:, None]})
            small = [batcher.submit("one", {"x": np.full((3, 1), v, np.float32)}) for v in (100, 200)]
            return await asyncio.gather(big, *small)
        finally:
            await batcher.stop()

    big, *small = asyncio.run(main())
    assert big["y"][:, 0].tolist() == [2.0 * i for i in range(20)]
    assert [s["y"][:, 0].tolist() for s in small] == [[200.0] * 3, [400.0] * 3]
    sizes = [n for _, n in model.calls]
    assert max(sizes) <= 8 and sum(sizes) == 26 and len(sizes) == 4  # 8 | 3+3+2 | 8 | 2 - all rows packed


def test_large_bodies_decode_in_a_worker_process_with_the_same_errors():
    sigs = FakeModel().signatures

    def spooled(data: bytes) -> SpooledBody:
        body = SpooledBody()
        body.write(data)
        body.finish()
        return body

    async def main():
        decoder = Decoder(sigs)
        good = spooled(b'{"signature_name": "one", "instances": ' + str([[float(i)] for i in range(50)]).encode() + b"}")
        bad = spooled(b'{"signature_name": "ints", "instances": [' + b"1, " * 40 + b"1e30]}")
        try:
            name, inputs, fmt = await decoder.predict(good)
            with pytest.raises(BadRequest, match="outside DT_INT32"):
                await decoder.predict(bad)
            return name, inputs, fmt
        finally:
            decoder.close()
            good.close()
            bad.close()

    name, inputs, fmt = asyncio.run(main())
    assert (name, fmt) == ("one", "row") and inputs["x"][:, 0].tolist() == [float(i) for i in range(50)]


def test_body_over_a_mebibyte_goes_through_a_file_and_the_worker(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    rows = [[float(i % 7)] for i in range(200_000)]  # about 1.4 MB of JSON
    model = FakeModel()
    with TestClient(create_app(model, name="m", options=BatchOptions(max_batch_size=4096))) as client:
        response = client.post("/v1/models/m:predict", json={"signature_name": "one", "instances": rows})
        assert response.status_code == 200, response.text[:300]
        assert response.json()["predictions"][:8] == [[2.0 * (i % 7)] for i in range(8)]
        assert len(response.json()["predictions"]) == 200_000
        bad = client.post("/v1/models/m:predict", json={"signature_name": "ints", "instances": [1] * 300_000 + [1.5]})
        assert bad.status_code == 400 and "whole numbers" in bad.json()["error"]
    assert not list(tmp_path.iterdir())  # the spooled bodies are gone


@pytest.mark.parametrize("text,size", [("64MB", 64 << 20), ("512kb", 512 << 10), ("1.5GiB", 3 << 29), ("4096", 4096)])
def test_sizes_parse(text, size):
    from multiworker.serve.limits import parse_size

    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["abc", "10", "5 parsecs", "-1MB"])
def test_bad_sizes_name_the_flag(text):
    from multiworker.errors import UserError
    from multiworker.serve.limits import parse_size

    with pytest.raises(UserError, match="--max-request-size"):
        parse_size(text)
