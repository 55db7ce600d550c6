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
