"""A Ray job whose replicas can never be placed (another driver holds every CPU): the launcher
retries the placement as the restart policy allows, then ends the job Failed, exit 1 with a
one-line reason; not a bad-input error (exit 2), not a traceback. A one-node Ray started in this
process (stopped by ``ray.shutdown``), the real CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

ray = pytest.importorskip("ray")


@pytest.fixture
def busy_ray():
    """A local two-CPU Ray cluster whose CPUs a placement group of this process holds; its address."""
    from ray.util.placement_group import placement_group, remove_placement_group

    old = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_ADDRESS="")
    temp = tempfile.mkdtemp(prefix="ray-mwi-")  # short: Ray's socket paths must fit 107 bytes
    ray.init(address="local", num_cpus=2, object_store_memory=80_000_000, include_dashboard=False,
             _temp_dir=temp, logging_level="WARNING", log_to_driver=False)
    try:
        hog = placement_group([{"CPU": 2}])
        ray.get(hog.ready(), timeout=30)
        yield ray.get_runtime_context().gcs_address
        remove_placement_group(hog)
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def test_a_job_that_can_never_be_placed_fails_with_exit_1(tmp_path, mw_home, busy_ray):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "prog.py").write_text("print('never runs')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: busy\ncommand: [python, prog.py]\nworking_dir: code\npools: {worker: {replicas: 2}}\n"
                    "run_policy: {backoff_limit: 1, backoff: 0.1}\n")
    env = {**os.environ, "MULTIWORKER_HOME": str(mw_home), "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": "",
           "MULTIWORKER_RAY_PLACEMENT_TIMEOUT": "1"}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "multiworker", "run", str(spec), "--backend", "ray",
                           "--ray-address", busy_ray], capture_output=True, text=True, env=env, timeout=240,
                          check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-4000:]
    assert "Traceback" not in out and "error: " not in proc.stderr, out[-4000:]
    reason = ("could not start attempt 1: placement: the Ray cluster could not place the job's 2 replicas "
              "within 1s: ")
    final = [line for line in proc.stdout.splitlines() if line.startswith("Failed: ")]
    assert len(final) == 1 and final[0].startswith(f"Failed: {reason}"), proc.stdout[-4000:]
    assert time.monotonic() - started < 120  # two bounded waits of 1s, not Ray's 60s default
    status = json.loads(subprocess.run([sys.executable, "-m", "multiworker", "status", "last", "--json"],
                                       capture_output=True, text=True, env=env, check=True).stdout)
    assert (status["state"], status["restarts"]) == ("Failed", 1)
    assert status["message"].startswith(reason) and "\n" not in status["message"]
    assert status["replicas"] == []  # nothing was ever started
    events = subprocess.run([sys.executable, "-m", "multiworker", "describe", "last"], capture_output=True,
                            text=True, env=env, check=True).stdout
    assert events.count("StartFailed") == 2, events
    assert not [pg for pg in ray.util.placement_group_table().values()
                if pg["name"].startswith("multiworker-") and pg["state"] != "REMOVED"]  # the job's were removed


def _ray_run(tmp_path, mw_home, address, **env):
    (tmp_path / "code").mkdir(exist_ok=True)
    (tmp_path / "code" / "prog.py").write_text("print('never runs')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("name: nohead\ncommand: [python, prog.py]\nworking_dir: code\npools: {worker: {replicas: 2}}\n")
    env = {**os.environ, "MULTIWORKER_HOME": str(mw_home), "RAY_AUTH_MODE": "disabled", "RAY_ADDRESS": "", **env}
    return env, subprocess.Popen([sys.executable, "-m", "multiworker", "run", str(spec), "--backend", "ray",
                                  "--ray-address", address], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, env=env)


def _status(env) -> dict:
    return json.loads(subprocess.run([sys.executable, "-m", "multiworker", "status", "last", "--json"],
                                     capture_output=True, text=True, env=env, check=True).stdout)


def test_an_address_where_nothing_listens_is_a_one_line_error_naming_it(tmp_path, mw_home):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env, proc = _ray_run(tmp_path, mw_home, f"127.0.0.1:{port}", MULTIWORKER_RAY_CONNECT_TIMEOUT="3")
    out, err = proc.communicate(timeout=120)  # bounded: Ray alone retries for many minutes
    assert proc.returncode == 2, out + err
    assert err.startswith(f"error: --ray-address 127.0.0.1:{port}") and err.count("\n") == 1, err
    assert "no Ray head answers there" in err and "Traceback" not in out + err
    doc = _status(env)
    assert doc["state"] == "Failed" and f":{port}" in doc["message"]


def test_a_stop_signal_while_connecting_cancels_the_job(tmp_path, mw_home):
    """Something listens but never speaks Ray: the launcher is still connecting when SIGINT comes."""
    import signal
    import socket
    import threading

    listener = socket.create_server(("", 0))  # Ray dials the node IP for a loopback address
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []
    dialed = threading.Event()

    def accept():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            if len(accepted) >= 2:  # the probe's, then Ray's own
                dialed.set()

    threading.Thread(target=accept, daemon=True).start()
    try:
        env, proc = _ray_run(tmp_path, mw_home, f"127.0.0.1:{port}", MULTIWORKER_RAY_INIT_TIMEOUT="600")
        assert dialed.wait(120), "the launcher never dialed the address"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        listener.close()
        for conn in accepted:
            conn.close()
    assert proc.returncode != 0 and "Traceback" not in out + err, out + err
    doc = _status(env)
    assert doc["state"] == "Cancelled", doc
