"""The Ray backend on a real two-host Ray cluster built on this machine (two network namespaces
joined by a veth pair, see ``ray_netns``): the launcher runs in the head's namespace, replicas run
on both nodes with real TensorFlow. Needs root and `ip`; skips with the reason otherwise."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from helpers import REPO, assert_resumed, no_processes_left, wait_for
from ray_netns import HEAD_IP, NODE_IP, RAY_ENV, TwoHostRay, unavailable_reason

from multiworker.job import Store

pytestmark = pytest.mark.integration
MNIST = str(REPO / "examples" / "mnist" / "job.yaml")
TAXI_PS = str(REPO / "examples" / "taxifare" / "job-ps.yaml")


@pytest.fixture(scope="module")
def cluster():
    reason = unavailable_reason()
    if reason:
        print(f"\nskipping the two-host Ray tests: {reason}", file=sys.stderr)
        pytest.skip(reason)
    pytest.importorskip("ray")
    two = TwoHostRay()
    try:
        two.start()
        yield two
    finally:
        two.stop()


def _env(home: Path) -> dict:
    return {**os.environ, **RAY_ENV, "MULTIWORKER_HOME": str(home),
            "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}


def _launcher(cluster: TwoHostRay, home: Path, spec: str, *args: str) -> list[str]:
    """`multiworker run SPEC --backend ray ... ARGS` in the head node's namespace."""
    return [*cluster.exec_in(cluster.head_ns), sys.executable, "-m", "multiworker", "run", spec,
            "--backend", "ray", "--ray-address", cluster.address, "-q", *args]


def _run(cluster, home: Path, *args: str, timeout: float = 420) -> subprocess.CompletedProcess:
    proc = subprocess.run(_launcher(cluster, home, *args), capture_output=True, text=True, env=_env(home),
                          timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    return proc


def _status(home: Path) -> dict:
    out = subprocess.run([sys.executable, "-m", "multiworker", "status", "last", "--json"], capture_output=True,
                         text=True, env=_env(home), check=True)
    return json.loads(out.stdout)


def _tf_config(log: Path) -> dict:
    """The TF_CONFIG the actor gave the replica, from the first line of its log."""
    first = log.read_text().splitlines()[0]
    return json.loads(first.split("TF_CONFIG=", 1)[1])


def test_mnist_two_workers_one_per_host(cluster, mw_home):
    _run(cluster, mw_home, MNIST, "--set", "placement=strict_spread", "--", "--epochs", "1",
         "--steps-per-epoch", "20")
    doc = _status(mw_home)
    assert doc["state"] == "Succeeded" and doc["backend"] == "ray" and doc["restarts"] == 0
    hosts = {r["name"]: r["host"] for r in doc["replicas"]}
    assert hosts == {"worker-0": HEAD_IP, "worker-1": NODE_IP}  # worker 0 on the launcher's node
    for rep in doc["replicas"]:
        config = _tf_config(Path(doc["job_dir"]) / "attempt_0" / f"{rep['name']}.log")
        assert config["task"] == {"type": "worker", "index": int(rep["name"][-1])}
        assert config["cluster"]["worker"][config["task"]["index"]] == f"{rep['host']}:{rep['port']}"
        assert [a.split(":")[0] for a in config["cluster"]["worker"]] == [HEAD_IP, NODE_IP]
    import tensorflow as tf

    x = np.load(REPO / "examples" / "mnist" / "data" / "mnist.npz")["x_test"][:4]
    serve = tf.saved_model.load(str(Path(doc["output_dir"]) / "model")).signatures["serving_default"]
    (pred,) = serve(tf.constant(x.reshape(4, 28, 28, 1).astype("float32") / 255.0)).values()
    assert pred.shape == (4, 10)


def test_sigkill_on_second_host_restarts_group_and_resumes(cluster, mw_home):
    proc = subprocess.Popen(_launcher(cluster, mw_home, MNIST, "--set", "placement=strict_spread",
                                      "--set", "run_policy.backoff=1s", "--", "--epochs", "6",
                                      "--steps-per-epoch", "15"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(mw_home))
    try:
        store = Store(mw_home)
        job = wait_for(lambda: store.list_jobs() and store.list_jobs()[0], timeout=300)
        wait_for(lambda: any(m["replica"] == "worker-0" for m in store.metrics(job.id, "epoch")), timeout=240)
        remote = next(r for r in store.replicas(job.id) if r["host"] == NODE_IP)
        assert cluster.net_ns_of(remote["pid"]) == cluster.node_ns  # really on the second host
        os.kill(remote["pid"], signal.SIGKILL)
        out, _ = proc.communicate(timeout=360)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out[-4000:]
    doc = _status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    assert_resumed(mw_home, doc, 6)
    assert no_processes_left(doc["id"])


def test_chief_workers_and_ps_across_both_hosts(cluster, mw_home):
    _run(cluster, mw_home, TAXI_PS, "--", "--num_examples_to_train_on", "1920", "--num_evals", "2")
    doc = _status(mw_home)
    assert doc["state"] == "Succeeded"
    replicas = {r["name"]: r for r in doc["replicas"]}
    assert sorted(replicas) == ["chief-0", "ps-0", "worker-0", "worker-1"]
    assert {r["host"] for r in replicas.values()} == {HEAD_IP, NODE_IP}
    assert replicas["chief-0"]["host"] == HEAD_IP and replicas["chief-0"]["state"] == "Succeeded"
    chief = _tf_config(Path(doc["job_dir"]) / "attempt_0" / "chief-0.log")
    assert sorted(chief["cluster"]) == ["chief", "ps", "worker"]
    assert (Path(doc["output_dir"]) / "model" / "saved_model.pb").is_file()
    assert no_processes_left(doc["id"])


def test_ctrl_c_leaves_no_replica_on_either_host(cluster, mw_home):
    proc = subprocess.Popen(_launcher(cluster, mw_home, MNIST, "--set", "placement=strict_spread", "--",
                                      "--epochs", "50", "--steps-per-epoch", "50"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(mw_home))
    try:
        store = Store(mw_home)
        job = wait_for(lambda: store.list_jobs() and store.list_jobs()[0], timeout=300)
        reps = wait_for(lambda: (r := store.replicas(job.id)) and len(r) == 2
                        and all(x["state"] == "Running" for x in r) and r, timeout=120)
        where = {f"{r['role']}-{r['idx']}": cluster.net_ns_of(r["pid"]) for r in reps}
        assert where == {"worker-0": cluster.head_ns, "worker-1": cluster.node_ns}
        environ = Path(f"/proc/{reps[1]['pid']}/environ").read_bytes().split(b"\0")
        tf_config = json.loads(next(v for v in environ if v.startswith(b"TF_CONFIG=")).split(b"=", 1)[1])
        assert tf_config["task"]["index"] == 1 and tf_config["cluster"]["worker"][1].startswith(NODE_IP)
        time.sleep(1)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-3000:]
    assert Store(mw_home).get_job(job.id).state == "Cancelled"
    assert no_processes_left(job.id)


def test_stopped_worker_on_second_host_is_hung_and_dumped_there(cluster, mw_home):
    """worker-1, on the second host, frozen inside epoch 2: its actor reads its stacks on that host,
    `Hung` names it, the group restarts and the job succeeds."""
    _run(cluster, mw_home, MNIST, "--set", "placement=strict_spread", "--set", "run_policy.hang_timeout=20s",
         "--set", "run_policy.backoff=1s", "--inject-failure", "worker-1@epoch:1:STOP", "--", "--epochs", "2",
         "--steps-per-epoch", "40")
    doc = _status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    (hung,) = [e for e in Store(mw_home).events(doc["id"]) if e["reason"] == "Hung"]
    assert hung["replica"] == "worker-1" and "stacks of 2/2 replicas" in hung["message"], hung["message"]
    folder = Path(re.search(r"replicas in (\S+)", hung["message"]).group(1))
    stopped, waiting = (folder / "worker-1.txt").read_text(), (folder / "worker-0.txt").read_text()
    assert "stopped" in stopped.splitlines()[0] and '"MainThread"' in stopped, stopped
    assert "stopped" not in waiting.splitlines()[0] and '"MainThread"' in waiting, waiting
