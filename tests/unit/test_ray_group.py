"""RayGroup on a real one-node Ray started in this process, with a trivial replica program:
placement, start, poll, log streaming, signals, stop with grace, samples, a lost actor, and the
one-line errors for a job the cluster cannot fit."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import pytest

from multiworker.cluster import ReplicaId
from multiworker.errors import StartFailed, UserError
from multiworker.spec.model import JobSpec

ray = pytest.importorskip("ray")

from multiworker.backends.ray.group import RayGroup  # noqa: E402

W0, W1 = ReplicaId("worker", 0), ReplicaId("worker", 1)
PROGRAM = """
import os, signal, sys, time
def term(*_):
    print("got SIGTERM", flush=True)
    sys.exit(3)
signal.signal(signal.SIGTERM, term)
print("hello", os.environ["GREETING"], os.getcwd(), flush=True)
time.sleep(float(sys.argv[1]))
print("bye", flush=True)
"""


@pytest.fixture(scope="module")
def local_ray():
    old = {k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_ADDRESS")}
    os.environ.update(RAY_AUTH_MODE="disabled", RAY_ADDRESS="")
    temp = tempfile.mkdtemp(prefix="ray-mwu-")  # short: Ray's socket paths must fit 107 bytes
    ray.init(address="local", num_cpus=2, object_store_memory=80_000_000, include_dashboard=False,
             _temp_dir=temp, logging_level="WARNING", log_to_driver=False)
    yield
    ray.shutdown()
    shutil.rmtree(temp, ignore_errors=True)
    for k, v in old.items():
        os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture
def job(tmp_path, local_ray):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "prog.py").write_text(PROGRAM)
    spec = JobSpec.model_validate({"name": "t", "command": ["python", "prog.py"], "working_dir": "code",
                                   "pools": {"worker": {"replicas": 2}}})
    groups = []

    def make(**kw):
        group = RayGroup(spec, "jobunit", base_dir=tmp_path, output_dir=str(tmp_path / "out"),
                         placement_timeout=60, **kw)  # returns once placed
        groups.append(group)
        return group

    yield make
    for group in groups:
        group.close()


def _start(group, tmp_path, seconds: dict) -> dict:
    pids = {}
    for rid, secs in seconds.items():
        pids[rid] = group.start(rid, [sys.executable, "prog.py", str(secs)], tmp_path / "code",
                                {"GREETING": rid.name}, tmp_path / "attempt_0" / f"{rid.name}.log")
    return pids


def _until(predicate, timeout=20.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("condition not met in time")


def _log(group, tmp_path, rid) -> bytes:
    """The driver-side log file, after letting the group fetch what is new."""
    group.poll()
    return (tmp_path / "attempt_0" / f"{rid.name}.log").read_bytes()


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_place_start_poll_and_stream_logs(job, tmp_path):
    group = job()
    where = group.place([W0, W1], attempt=0)
    assert set(where) == {W0, W1} and where[W0].port != where[W1].port
    assert where[W0].host == ray.util.get_node_ip_address() and where[W0].node
    pids = _start(group, tmp_path, {W0: 0.2, W1: 60})
    assert all(_alive(pid) for pid in pids.values())
    codes = _until(lambda: (c := group.poll())[W0] is not None and c)
    assert codes == {W0: 0, W1: None}
    streamed = _until(lambda: group.read_log(W0))
    header, greeting = streamed.splitlines()[:2]
    assert header.startswith(b"[multiworker] worker-0 on Ray node " + where[W0].host.encode())
    assert greeting == b"hello worker-0 " + str(tmp_path / "code").encode()
    _until(lambda: b"bye" in _log(group, tmp_path, W0))
    rows = group.samples()
    assert [name for name, _, _ in rows] == ["worker-1"] and rows[0][2] > 1_000_000  # RSS of a live python


def test_signal_reaches_the_replica_and_stop_uses_grace(job, tmp_path):
    group = job()
    group.place([W0, W1], attempt=0)
    pids = _start(group, tmp_path, {W0: 60, W1: 60})
    _until(lambda: b"hello" in _log(group, tmp_path, W1))
    assert group.signal(W1, signal.SIGKILL)
    assert _until(lambda: group.poll()[W1]) == -signal.SIGKILL
    assert not group.signal(W1, signal.SIGTERM)  # already gone
    _until(lambda: group.read_log(W0))
    group.stop([W0], grace=5)
    assert group.poll()[W0] == 3  # its SIGTERM handler ran within the grace period
    assert b"got SIGTERM" in (tmp_path / "attempt_0" / "worker-0.log").read_bytes()
    assert not any(_alive(pid) for pid in pids.values())


def test_a_lost_actor_is_a_killed_replica_and_takes_it_down(job, tmp_path):
    group = job()
    group.place([W0, W1], attempt=0)
    pids = _start(group, tmp_path, {W0: 60, W1: 60})
    ray.kill(group._actors[W1], no_restart=True)  # the actor (as on a lost node) dies
    assert _until(lambda: group.poll()[W1]) == -signal.SIGKILL
    assert b"died (actor or node lost)" in (tmp_path / "attempt_0" / "worker-1.log").read_bytes()
    _until(lambda: not _alive(pids[W1]), timeout=10)  # PR_SET_PDEATHSIG: the replica died with it
    assert _alive(pids[W0])
    group.close()
    _until(lambda: not _alive(pids[W0]), timeout=10)


def test_close_releases_placement_group_for_the_next_attempt(job, tmp_path):
    group = job()
    for attempt in range(2):  # the same group object is placed again per attempt
        group.place([W0, W1], attempt=attempt)
        _start(group, tmp_path, {W0: 60, W1: 60})
        group.stop([W0, W1], grace=1)
        group.close()
    states = [pg["state"] for pg in ray.util.placement_group_table().values()
              if pg["name"].startswith("multiworker-jobunit")]
    assert states and set(states) == {"REMOVED"}


@pytest.mark.parametrize(("placement", "replicas", "message"), [
    ("strict_spread", 2, r"placement strict_spread puts each of the 2 replicas on its own node .* needs 2 nodes, "
                         r"the cluster has 1 .*2 CPU.*--set placement=spread"),
    ("spread", 3, r"placement spread: 3 replicas need 3 CPU \(1 each\), the cluster has 2 replica slots"),
    ("pack", 3, r"placement pack: 3 replicas need 3 CPU"),
], ids=["strict_spread-one-node", "spread-too-few-cpus", "pack-too-few-cpus"])
def test_a_job_the_cluster_cannot_fit_is_one_line_error(job, placement, replicas, message):
    group = job(placement=placement)
    started = time.monotonic()
    with pytest.raises(UserError, match=message) as info:
        group.place([ReplicaId("worker", i) for i in range(replicas)], attempt=0)
    assert "\n" not in str(info.value) and time.monotonic() - started < 30  # not the 60 s placement wait


def test_busy_cluster_is_a_start_failure_after_the_bounded_wait(job, tmp_path):
    """Busy resources may free: a retryable StartFailed (the controller's restart policy decides), not bad input."""
    from ray.util.placement_group import placement_group, remove_placement_group

    hog = placement_group([{"CPU": 2}])
    ray.get(hog.ready(), timeout=10)
    try:
        group = job()
        group.placement_timeout = 1
        with pytest.raises(StartFailed, match=r"could not place the job's 2 replicas within 1s: .*free: .*0 CPU"):
            group.place([W0, W1], attempt=0)
    finally:
        remove_placement_group(hog)


@pytest.mark.parametrize("value, expect", [(None, 60.0), ("2.5", 2.5), ("nope", None), ("0", None), ("inf", None)],
                         ids=["unset", "seconds", "not-a-number", "zero", "infinite"])
def test_placement_wait_comes_from_the_environment(monkeypatch, tmp_path, value, expect):
    """MULTIWORKER_RAY_PLACEMENT_TIMEOUT bounds the wait for busy resources; a bad value is a one-line error."""
    spec = JobSpec.model_validate({"name": "t", "command": ["python", "p.py"], "pools": {"worker": {"replicas": 1}}})
    if value is None:
        monkeypatch.delenv("MULTIWORKER_RAY_PLACEMENT_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("MULTIWORKER_RAY_PLACEMENT_TIMEOUT", value)

    def make(**kw):
        return RayGroup(spec, "j", base_dir=tmp_path, output_dir=str(tmp_path), **kw)

    if expect is None:
        with pytest.raises(UserError, match=rf"^MULTIWORKER_RAY_PLACEMENT_TIMEOUT: '{value}' is not a number of seconds"):
            make()
    else:
        assert make().placement_timeout == expect
    assert make(placement_timeout=7).placement_timeout == 7  # an explicit wait wins
