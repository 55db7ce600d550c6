"""Benchmark (not a test): `multiworker serve` on the MNIST CNN over REST and gRPC against the model in-process.

One run, side by side: the SavedModel's signature called in-process (no server) on one row, from 16
threads on one row each, and on batches of the sizes the server formed; the server over REST and over gRPC with 1 and 16 clients,
each client its own process (one image per request, keep-alive connection / one channel); then a
~100 MB REST request sent while 4 one-row clients run, and the server's memory before and after; then,
as baselines, 16 clients on a server whose batches wait to fill (--batch-timeout 5ms) and, with
--gc-baseline, REST on a server that does not gc.freeze() after loading.
The last line is JSON: grpc_16_ratio and rest_16_ratio (rows/s with 16 clients over the in-process
rows/s at the same mean batch size), rest_1_p99_ms, grpc_1_p99_ms, in_process_1_row_ms (median),
big_request_extra_ms (the other clients' p99 latency during the big request minus their p99 before it;
their medians and maxima are printed too).
Run: .venv/bin/python bench/serve_mnist.py [--seconds 5] [--big-mb 100] [--timeout-baseline 5ms] [--gc-baseline]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
PREDICT = "/tensorflow.serving.PredictionService/Predict"


def build_model(path: Path) -> None:
    spec = importlib.util.spec_from_file_location("mnist_model", REPO / "examples/mnist/trainer/model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build_model(1e-3, 100).save(str(path), save_format="tf")


def _stats(latencies_s: list[float], seconds: float) -> dict:
    ms = np.array(latencies_s) * 1000
    return {"requests": len(ms), "rps": len(ms) / seconds, "p50_ms": float(np.percentile(ms, 50)),
            "p99_ms": float(np.percentile(ms, 99)), "max_ms": float(ms.max())}


# --- clients: each runs in its own process and imports no TensorFlow -----------------------------------

def _rest_client(url: str, body: bytes, start, stop, out) -> None:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    headers = {"content-type": "application/json"}

    def call():
        conn.request("POST", parts.path, body, headers)
        response = conn.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")

    _loop(call, start, stop, out)


def _grpc_client(address: str, request: bytes, start, stop, out) -> None:
    import grpc

    with grpc.insecure_channel(address) as channel:
        predict = channel.unary_unary(PREDICT)  # TF Serving's method; the parent serialized the request once

        def call():
            predict(request, timeout=600)

        _loop(call, start, stop, out)


def _loop(call, start, stop, out) -> None:
    call()  # connect and warm up before the clock starts
    out.put("ready")
    start.wait()
    stamps = []
    while not stop.is_set():
        t = time.perf_counter()
        call()
        stamps.append((time.time(), time.perf_counter() - t))
    out.put(stamps)


class _Clients:
    """``n`` client processes, started and warmed up; ``run(seconds)`` or ``start()``/``stop()`` -> their stamps."""

    def __init__(self, target, args: tuple, n: int):
        ctx = multiprocessing.get_context("spawn")  # no fork of a process that runs TensorFlow
        self.start_event, self.stop_event, self.out = ctx.Event(), ctx.Event(), ctx.Queue()
        self.procs = [ctx.Process(target=target, args=(*args, self.start_event, self.stop_event, self.out))
                      for _ in range(n)]
        for p in self.procs:
            p.start()
        for _ in self.procs:
            assert self.out.get(timeout=600) == "ready"

    def start(self) -> None:
        self.start_event.set()

    def stop(self) -> list[list[tuple[float, float]]]:
        self.stop_event.set()
        results = [self.out.get(timeout=600) for _ in self.procs]
        for p in self.procs:
            p.join(60)
        return results

    def run(self, seconds: float) -> list[list[tuple[float, float]]]:
        self.start()
        time.sleep(seconds)
        return self.stop()


# --- the big request ----------------------------------------------------------------------------------

def _big_body(megabytes: float) -> bytes:
    row = np.random.default_rng(1).random((28, 28, 1)).round(6).tolist()
    one = len(json.dumps(row)) + 1
    return json.dumps({"instances": [row] * max(1, int(megabytes * 1e6 / one))}).encode()


def _send(url: str, body: bytes) -> tuple[int, float, float]:
    import http.client
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    began = time.time()
    conn.request("POST", parts.path, body, {"content-type": "application/json"})
    response = conn.getresponse()
    response.read()
    return response.status, began, time.time()


def big_request(url: str, small_body: bytes, megabytes: float, pid: int, quiet: float) -> dict:
    """4 one-row REST clients; after ``quiet`` s a ~``megabytes`` request; their latency before and during it."""
    import threading

    import psutil

    def rss() -> float:
        proc = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [proc, *proc.children(recursive=True)]) / 2**20

    body = _big_body(megabytes)
    clients = _Clients(_rest_client, (url, small_body), 4)
    before = rss()
    clients.start()
    time.sleep(quiet)
    result: list = []
    sender = threading.Thread(target=lambda: result.append(_send(url, body)))
    sender.start()
    peak = before
    while sender.is_alive():
        peak = max(peak, rss())
        sender.join(0.1)
    time.sleep(1)
    stamps = [s for client in clients.stop() for s in client]
    status, began, ended = result[0]
    quiet_ms = [lat * 1000 for end, lat in stamps if end < began]
    during_ms = [lat * 1000 for end, lat in stamps if end - lat > began - 0.001 and end - lat < ended]
    time.sleep(2)
    return {
        "big_request_status": status, "big_request_mb": round(len(body) / 1e6, 1),
        "big_request_s": round(ended - began, 2),
        "others_quiet_p50_ms": round(float(np.median(quiet_ms)), 2),
        "others_quiet_p99_ms": round(float(np.percentile(quiet_ms, 99)), 2),
        "others_quiet_max_ms": round(max(quiet_ms), 2),
        "others_during_p50_ms": round(float(np.median(during_ms)), 2) if during_ms else None,
        "others_during_p99_ms": round(float(np.percentile(during_ms, 99)), 2) if during_ms else None,
        "others_during_max_ms": round(max(during_ms), 2) if during_ms else None,
        # the extra latency the big request costs the others: their p99 during it over their p99 before
        "big_request_extra_ms": round(float(np.percentile(during_ms, 99) - np.percentile(quiet_ms, 99)), 2)
        if during_ms else None,
        "rss_before_mb": round(before), "rss_peak_mb": round(peak), "rss_after_mb": round(rss()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument("--big-mb", type=float, default=100.0, help="size of the big request (0: skip)")
    parser.add_argument("--timeout-baseline", default="5ms", metavar="DURATION",
                        help="also 16 clients over REST and gRPC on a server whose batches wait this long to fill "
                             "(--batch-timeout; '' to skip)")
    parser.add_argument("--gc-baseline", action="store_true",
                        help="also REST with 16 clients on a server that does not gc.freeze() after loading")
    args = parser.parse_args()
    sys.path.insert(0, str(REPO / "src"))
    image = np.random.default_rng(0).random((1, 28, 28, 1), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "mnist"
        build_model(model_dir)
        report = run(model_dir, image, args)
    print(json.dumps(report))


def run(model_dir: Path, image: np.ndarray, args) -> dict:
    import tensorflow as tf

    from multiworker.serve.model import load

    servable = load(model_dir)
    (input_name,) = servable.signatures["serving_default"].inputs

    def model_call_ms(rows: int, seconds: float) -> list[float]:
        batch = np.repeat(image, rows, axis=0)
        servable.run("serving_default", {input_name: batch})
        times, stop = [], time.time() + seconds
        while time.time() < stop:
            t = time.perf_counter()
            servable.run("serving_default", {input_name: batch})
            times.append((time.perf_counter() - t) * 1000)
        return times

    one_row = model_call_ms(1, args.seconds)
    in_process = {"p50_ms": float(np.median(one_row)), "p99_ms": float(np.percentile(one_row, 99)),
                  "rps": 1000 / float(np.mean(one_row))}
    threads_16 = _threads(lambda: servable.run("serving_default", {input_name: image}), 16, args.seconds)

    proc, info = _start_server(model_dir)
    rows: list[dict] = [{"mode": "in-process", "clients": 1, **in_process, "rows_per_call": 1.0},
                        {"mode": "in-process threads", "clients": 16, **threads_16, "rows_per_call": 1.0}]
    body = json.dumps({"instances": image.tolist()}).encode()
    request = _predict_request(tf, image, input_name)
    try:
        url = info["url"] + ":predict"
        for api, target, target_args in (("REST", _rest_client, (url, body)),
                                          ("gRPC", _grpc_client, (info["grpc"], request))):
            for clients in (1, 16):
                rows.append(_phase(api, clients, proc.pid, info, target, target_args, args.seconds))
        for row in rows[2:]:  # the model alone on batches of the size the server formed, same rows
            size = max(1, round(row["rows_per_call"]))
            per_call = float(np.median(model_call_ms(size, min(args.seconds, 3.0))))  # robust to others' load
            row["in_process_rps_same_batches"] = size * 1000 / per_call
            row["ratio"] = row["rps"] / row["in_process_rps_same_batches"]
        big = big_request(url, body, args.big_mb, proc.pid, args.seconds) if args.big_mb else None
    finally:
        proc.terminate()
        proc.wait(60)
    if args.timeout_baseline:  # batches that wait to fill, against the default that takes what is queued
        mode = f"--batch-timeout {args.timeout_baseline}"
        proc, info = _start_server(model_dir, extra=("--batch-timeout", args.timeout_baseline))
        try:
            url = info["url"] + ":predict"
            for api, target, target_args in (("REST", _rest_client, (url, body)),
                                              ("gRPC", _grpc_client, (info["grpc"], request))):
                rows.append(_phase(f"{api}, {mode}", 16, proc.pid, info, target, target_args, args.seconds))
        finally:
            proc.terminate()
            proc.wait(60)
    if args.gc_baseline:  # the same server without gc.freeze() after loading: REST, 16 clients
        proc, info = _start_server(model_dir, freeze=False)
        try:
            baseline = _phase("REST, no gc.freeze", 16, proc.pid, info, _rest_client,
                              (info["url"] + ":predict", body), args.seconds)
            rows.append(baseline)
        finally:
            proc.terminate()
            proc.wait(60)

    def find(mode, clients):
        return next(r for r in rows if r["mode"] == mode and r["clients"] == clients)

    print(f"host {platform.node()}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end")
    print("| mode | clients | requests/s | p50 ms | p99 ms | rows per model call | in-process rows/s, same batches "
          "| ratio | server CPU ms per request |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        same = f"{r['in_process_rps_same_batches']:,.0f}" if "ratio" in r else "-"
        ratio = f"{r['ratio']:.2f}" if "ratio" in r else "-"
        cpu = f"{r['server_cpu_ms_per_request']:.2f}" if "server_cpu_ms_per_request" in r else "-"
        print(f"| {r['mode']} | {r['clients']} | {r['rps']:,.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
              f"{r['rows_per_call']:.1f} | {same} | {ratio} | {cpu} |")
    report = {
        "grpc_16_ratio": round(find("gRPC", 16)["ratio"], 3),
        "rest_16_ratio": round(find("REST", 16)["ratio"], 3),
        "grpc_1_ratio": round(find("gRPC", 1)["ratio"], 3),
        "rest_1_ratio": round(find("REST", 1)["ratio"], 3),
        "grpc_16_ratio_vs_16_threads_1_row": round(find("gRPC", 16)["rps"] / threads_16["rps"], 3),
        "rest_16_ratio_vs_16_threads_1_row": round(find("REST", 16)["rps"] / threads_16["rps"], 3),
        "rest_1_p99_ms": round(find("REST", 1)["p99_ms"], 3),
        "grpc_1_p99_ms": round(find("gRPC", 1)["p99_ms"], 3),
        "in_process_1_row_ms": round(in_process["p50_ms"], 3),
        "in_process_1_row_p99_ms": round(in_process["p99_ms"], 3),
        "latency_target_ms": round(2 * in_process["p50_ms"] + 1, 3),
        "rest_16_server_cpu_ms_per_request": round(find("REST", 16)["server_cpu_ms_per_request"], 3),
        "grpc_16_server_cpu_ms_per_request": round(find("gRPC", 16)["server_cpu_ms_per_request"], 3),
        "load_average": round(os.getloadavg()[0], 1),
        "rest_16_rps": round(find("REST", 16)["rps"], 1), "grpc_16_rps": round(find("gRPC", 16)["rps"], 1),
        **({"rest_16_timeout_baseline_rps": round(find(f"REST, --batch-timeout {args.timeout_baseline}", 16)["rps"], 1),
            "grpc_16_timeout_baseline_rps": round(find(f"gRPC, --batch-timeout {args.timeout_baseline}", 16)["rps"], 1)}
           if args.timeout_baseline else {}),
        **({"rest_16_no_gc_freeze_rps": round(find("REST, no gc.freeze", 16)["rps"], 1),
            "rest_16_no_gc_freeze_p99_ms": round(find("REST, no gc.freeze", 16)["p99_ms"], 2)}
           if args.gc_baseline else {}),
    }
    report.update(big or {})
    return report


def _predict_request(tf, image: np.ndarray, input_name: str) -> bytes:
    from tensorflow_serving.apis import predict_pb2

    request = predict_pb2.PredictRequest()
    request.model_spec.name = "mnist"
    request.inputs[input_name].CopyFrom(tf.make_tensor_proto(image))
    return request.SerializeToString()


def _start_server(model_dir: Path, freeze: bool = True, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, dict]:
    from multiworker.procs import free_ports

    rest_port, grpc_port = free_ports(2)
    # freeze=False: the server as it was before it froze its startup objects out of the collector's sight
    launch = (["-m", "multiworker"] if freeze else
              ["-c", "import gc, runpy; gc.freeze = lambda: None; runpy.run_module('multiworker', run_name='__main__')"])
    cmd = [sys.executable, *launch, "serve", str(model_dir), "--port", str(rest_port), "--grpc-port", str(grpc_port),
           "--name", "mnist", "--json", "--max-request-size", "256MB", *extra]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    return proc, json.loads(proc.stdout.readline())


def _phase(mode: str, clients: int, pid: int, info: dict, target, target_args: tuple, seconds: float) -> dict:
    metrics_url = info["url"].replace("/v1/models/mnist", "/monitoring/metrics")
    group = _Clients(target, target_args, clients)
    seen, cpu = _batch_totals(metrics_url), _cpu_seconds(pid)
    results = group.run(seconds)
    now, cpu = _batch_totals(metrics_url), _cpu_seconds(pid) - cpu
    latencies = [lat for stamps in results for _, lat in stamps]
    row = {"mode": mode, "clients": clients, **_stats(latencies, seconds)}
    calls = now[0] - seen[0]
    row["rows_per_call"] = (now[1] - seen[1]) / calls if calls else 0.0
    row["server_cpu_ms_per_request"] = cpu * 1000 / max(1, row["requests"])
    return row


def _threads(call, n: int, seconds: float) -> dict:
    """``call()`` in a loop from ``n`` threads (TensorFlow releases the GIL while the model runs)."""
    import threading

    latencies: list[list[float]] = [[] for _ in range(n)]
    stop = time.time() + seconds

    def loop(i: int) -> None:
        while time.time() < stop:
            t = time.perf_counter()
            call()
            latencies[i].append(time.perf_counter() - t)

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(n)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return _stats([x for lat in latencies for x in lat], seconds)


def _cpu_seconds(pid: int) -> float:
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def _batch_totals(metrics_url: str) -> tuple[int, float]:
    import urllib.request

    with urllib.request.urlopen(metrics_url, timeout=60) as response:
        doc = json.loads(response.read())
    return doc["batch_size"]["count"], doc["batch_size"]["sum"]


if __name__ == "__main__":
    main()
