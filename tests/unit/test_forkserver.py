"""The replica fork server (multiworker.zygote and backends.local.forkserver) with real processes:
a forked replica is what ``python -m MODULE ARGS`` would be (argv, cwd, env, sys.path, __main__,
its own session, exit codes, atexit, tracebacks, fresh random seeds), dies with its zygote, and
the group falls back to new interpreters where a zygote cannot serve. The zygote imports
TensorFlow: about 2 s per zygote, so one serves the whole module."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from multiworker.backends.local import LocalGroup, forkserver
from multiworker.cluster import ReplicaId
from multiworker.procs import child_environ, pid_alive

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the fork server needs Linux (PR_SET_PDEATHSIG)")

REPLICA = '''
import atexit, os, sys
import numpy
print("name", __name__)
print("argv", sys.argv[1:])
print("cwd", os.getcwd())
print("path0", sys.path[0])
print("mark", os.environ.get("MARK"), "TF_CONFIG" in os.environ)
print("session", os.getsid(0) == os.getpid())
print("tf-preloaded", "tensorflow" in sys.modules)
print("draw", numpy.random.randint(1 << 30))
atexit.register(lambda: print("atexit ran", flush=True))
mode = sys.argv[1]
if mode == "raise":
    raise RuntimeError("boom from the replica")
if mode == "sleep":
    import time
    print("sleeping", flush=True)
    time.sleep(60)
sys.exit(int(mode))
'''


def _wait(predicate, timeout=15.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def _lines(path: Path) -> dict[str, str]:
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in path.read_text().splitlines() if " " in line}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    (root / "pkg").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "task.py").write_text(REPLICA)
    (root / "pkg" / "quick.py").write_text("raise SystemExit(4)\n")
    return root


@pytest.fixture(scope="module")
def server(project):
    env = child_environ({"TF_USE_LEGACY_KERAS": "1", "MARK": "zygote", "TF_CONFIG": "{}"})
    srv = forkserver.ForkServer(sys.executable, project, env, project / "forkserver.log", label=["-m", "pkg.task"])
    assert srv.wait_ready(), srv.why
    yield srv
    srv.close()
    assert srv.proc.poll() is not None


def _fork(server, project, tmp_path, mode, mark="replica"):
    env = child_environ({"MARK": mark, "TF_CONFIG": '{"task": {}}'})
    log = tmp_path / f"{mode}-{mark}.log"
    return server.fork("pkg.task", [mode, "--flag"], project, env, log), log


def test_pure_helpers():
    assert forkserver.module_of(["python", "-m", "trainer.task", "--epochs", "2"]) == ("trainer.task", ["--epochs", "2"])
    assert forkserver.module_of(["python", "trainer/task.py"]) is None
    assert forkserver.module_of(["python", "-m"]) is None
    assert forkserver.enabled({}) and forkserver.enabled({"MULTIWORKER_PRELOAD": "1"})
    assert not any(forkserver.enabled({"MULTIWORKER_PRELOAD": v}) for v in ("0", "false", "OFF", "no"))
    assert forkserver.zygote_env({"TF_CONFIG": "x", "MULTIWORKER_REPLICA": "w", "A": "1"}) == {"A": "1"}


def test_forked_replica_is_what_python_dash_m_would_be(server, project, tmp_path):
    child, log = _fork(server, project, tmp_path, "3")
    assert child.wait(timeout=30) == 3
    seen = _lines(log)
    assert seen["name"] == "__main__"
    assert seen["argv"] == "['3', '--flag']"
    assert seen["cwd"] == str(project) and seen["path0"] == str(project)
    assert seen["mark"] == "replica True"  # the request's environment, not the zygote's
    assert seen["session"] == "True"
    assert seen["tf-preloaded"] == "True"
    assert "atexit ran" in log.read_text()
    assert oct(log.stat().st_mode & 0o777) == "0o600"


def test_exception_gives_traceback_and_exit_1_and_seeds_differ(server, project, tmp_path):
    first, log1 = _fork(server, project, tmp_path, "raise", "a")
    second, log2 = _fork(server, project, tmp_path, "0", "b")
    assert first.wait(timeout=30) == 1 and second.wait(timeout=30) == 0
    text = log1.read_text()
    assert "Traceback" in text and "RuntimeError: boom from the replica" in text
    assert _lines(log1)["draw"] != _lines(log2)["draw"]  # numpy's global generator reseeded per child


def test_an_exit_read_together_with_its_fork_is_not_lost(server, project, tmp_path, monkeypatch):
    # The launcher polls slowly here, so the child's exit arrives in the same read as its pid.
    real_sleep = time.sleep
    monkeypatch.setattr(forkserver.time, "sleep", lambda seconds: real_sleep(max(seconds, 0.5)))
    child = server.fork("pkg.quick", [], project, child_environ({}), tmp_path / "quick.log")
    assert child.wait(timeout=60) == 4  # a lost exit would never come


def test_signals_reach_the_replica_group(server, project, tmp_path):
    child, log = _fork(server, project, tmp_path, "sleep")
    assert _wait(lambda: "sleeping" in log.read_text())
    assert child.poll() is None and os.getsid(child.pid) == child.pid
    os.killpg(child.pid, signal.SIGTERM)
    assert child.wait(timeout=60) == -signal.SIGTERM


def test_children_die_with_their_zygote(project, tmp_path):
    env = child_environ({"TF_USE_LEGACY_KERAS": "1"})
    srv = forkserver.ForkServer(sys.executable, project, env, tmp_path / "fs.log")
    assert srv.wait_ready(), srv.why
    child, log = _fork(srv, project, tmp_path, "sleep")
    assert _wait(lambda: "sleeping" in log.read_text())
    srv.proc.kill()
    assert child.wait(timeout=60) == -signal.SIGKILL
    assert _wait(lambda: not pid_alive(child.pid))
    with pytest.raises(OSError, match="fork server is gone"):
        srv.fork("pkg.task", ["0"], project, env, tmp_path / "late.log")
    srv.close()


def test_a_zygote_that_cannot_preload_says_why(project, tmp_path):
    fake = tmp_path / "fake"
    (fake / "tensorflow").mkdir(parents=True)
    (fake / "tensorflow" / "__init__.py").write_text("raise ImportError('no TensorFlow here')\n")
    env = child_environ({"PYTHONPATH": os.pathsep.join([str(fake), *sys.path[1:]])})
    srv = forkserver.ForkServer(sys.executable, project, env, tmp_path / "fs.log")
    assert not srv.wait_ready()
    assert "import tensorflow failed" in srv.why and "no TensorFlow here" in srv.why
    assert srv.proc.poll() is not None


@pytest.mark.parametrize("preload", ["1", "0"], ids=["forked", "new-interpreter"])
def test_local_group_forks_module_replicas_unless_told_not_to(project, tmp_path, preload):
    group = LocalGroup()
    w0, w1 = ReplicaId("worker", 0), ReplicaId("worker", 1)
    group.place([w0, w1], attempt=0)
    env = {"MARK": "m", "MULTIWORKER_PRELOAD": preload}
    pid = group.start(w0, [sys.executable, "-m", "pkg.task", "sleep"], project, env, tmp_path / "a" / "w0.log")
    other = group.start(w1, [sys.executable, "-c", "import time; time.sleep(60)"], project, env, tmp_path / "w1.log")
    try:
        assert _wait(lambda: "sleeping" in (tmp_path / "a" / "w0.log").read_text())
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert (parent != os.getpid()) is (preload == "1")  # forked: a child of the zygote
        assert int(Path(f"/proc/{other}/stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()
        assert ((tmp_path / "a" / "forkserver.log").exists()) is (preload == "1")
        group.stop([w0, w1], grace=5.0)
        assert group.poll() == {w0: -signal.SIGTERM, w1: -signal.SIGTERM}
    finally:
        group.close()
        group.shutdown()
    assert not pid_alive(pid) and not pid_alive(other)


def test_local_group_starts_new_interpreters_once_its_zygote_died(project, tmp_path):
    group = LocalGroup()
    w0 = ReplicaId("worker", 0)
    group.place([w0], attempt=0)
    cmd = [sys.executable, "-m", "pkg.task", "sleep"]
    first = group.start(w0, cmd, project, {"MARK": "m"}, tmp_path / "first.log")
    try:
        assert _wait(lambda: "sleeping" in (tmp_path / "first.log").read_text())
        (server,) = [s for s in group._servers.values() if s is not None]
        server.proc.kill()  # the zygote dies: its replica with it
        assert _wait(lambda: group.poll()[w0] == -signal.SIGKILL)
        group.close()
        group.place([w0], attempt=1)
        second = group.start(w0, cmd, project, {"MARK": "m"}, tmp_path / "second.log")
        assert _wait(lambda: "sleeping" in (tmp_path / "second.log").read_text())
        assert int(Path(f"/proc/{second}/stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()
        group.stop([w0], grace=5.0)
    finally:
        group.close()
        group.shutdown()
    assert not pid_alive(first) and not pid_alive(second)
