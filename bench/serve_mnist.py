"""Benchmark (not a test): `multiworker serve` on the MNIST CNN, requests/s and p50/p99 latency.

1 and 16 concurrent clients (one image per request), server-side batching on and off, against
calling the same SavedModel signature in-process (no HTTP) from 1 and 16 threads.
Run: .venv/bin/python bench/serve_mnist.py [--seconds 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def build_model(path: Path) -> None:
    spec = importlib.util.spec_from_file_location("mnist_model", REPO / "examples/mnist/trainer/model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.build_model(1e-3, 100).save(str(path), save_format="tf")


def drive(call, clients: int, seconds: float) -> dict:
    """Run ``call()`` in a loop from ``clients`` threads for ``seconds``; requests/s and latency percentiles."""
    latencies: list[list[float]] = [[] for _ in range(clients)]
    stop = time.monotonic() + seconds

    def client(i: int) -> None:
        state = {}
        while time.monotonic() < stop:
            t = time.perf_counter()
            call(state)
            latencies[i].append(time.perf_counter() - t)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    all_ms = np.array([x for lat in latencies for x in lat]) * 1000
    return {"clients": clients, "requests": len(all_ms), "rps": len(all_ms) / elapsed,
            "p50_ms": float(np.percentile(all_ms, 50)), "p99_ms": float(np.percentile(all_ms, 99))}


def in_process(model_dir: Path, image: np.ndarray, seconds: float) -> list[dict]:
    from multiworker.serve.model import load

    servable = load(model_dir)
    (name,) = servable.signatures["serving_default"].inputs
    call = lambda _state: servable.run("serving_default", {name: image[None]})  # noqa: E731
    call({})
    return [drive(call, n, seconds) for n in (1, 16)]


def over_http(model_dir: Path, image: np.ndarray, seconds: float, batching: bool) -> list[dict]:
    import httpx

    from multiworker.backends.local.procs import free_ports

    (port,) = free_ports(1)
    args = [sys.executable, "-m", "multiworker", "serve", str(model_dir), "--port", str(port), "--name", "mnist", "--json"]
    proc = subprocess.Popen(args + ([] if batching else ["--no-batching"]), stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, env={**os.environ, "PYTHONPATH": str(REPO / "src")})
    try:
        url = json.loads(proc.stdout.readline())["url"] + ":predict"
        body = json.dumps({"instances": image[None].tolist()})

        def call(state):
            if "client" not in state:
                state["client"] = httpx.Client(timeout=60)
            response = state["client"].post(url, content=body, headers={"content-type": "application/json"})
            response.raise_for_status()

        call({})
        results, seen = [], {"count": 0, "sum": 0.0}
        for clients in (1, 16):
            results.append(drive(call, clients, seconds))
            now = httpx.get(url.replace("/v1/models/mnist:predict", "/monitoring/metrics")).json()["requests_per_batch"]
            calls = now["count"] - seen["count"]
            results[-1]["mean_requests_per_batch"] = round((now["sum"] - seen["sum"]) / calls, 2) if calls else 0
            seen = now
        return results
    finally:
        proc.terminate()
        proc.wait(60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="per measurement")
    args = parser.parse_args()
    image = np.random.default_rng(0).random((28, 28, 1), dtype=np.float32)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "mnist"
        build_model(model_dir)
        rows = [("in-process", r) for r in in_process(model_dir, image, args.seconds)]
        rows += [("HTTP, batching on", r) for r in over_http(model_dir, image, args.seconds, batching=True)]
        rows += [("HTTP, batching off", r) for r in over_http(model_dir, image, args.seconds, batching=False)]
    print("| mode | clients | requests/s | p50 ms | p99 ms | requests per model call |")
    print("|---|---|---|---|---|---|")
    for mode, r in rows:
        per_call = r.get("mean_requests_per_batch", 1.0)
        print(f"| {mode} | {r['clients']} | {r['rps']:,.0f} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | {per_call} |")


if __name__ == "__main__":
    main()
