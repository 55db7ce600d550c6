"""Replicas as containers (`run --containers`) of images `multiworker build` made, with podman.

Needs podman that runs here and the images `make images` builds (localhost/multiworker-base:bookworm,
localhost/multiworker-tf:2.21); every test skips and says why otherwise. Nothing needs a registry:
images are used with --pull never, and the push test starts its own (Debian's docker-registry).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

import pytest
import yaml
from helpers import REPO, mw, mw_popen, status, wait_for

from multiworker.job import Store

pytestmark = pytest.mark.integration
BASE = "localhost/multiworker-base:bookworm"
TF = "localhost/multiworker-tf:2.21"
MNIST = "localhost/mw-test-mnist:latest"
JOB = REPO / "examples" / "mnist" / "job.yaml"
LABEL = "multiworker.job"


def _podman_problem() -> str | None:
    if shutil.which("podman") is None:
        return "podman is not installed (make images installs it when root)"
    proc = subprocess.run(["podman", "info"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return f"podman does not run here: {(proc.stderr.strip().splitlines() or ['?'])[-1]}"
    for image in (BASE, TF):
        if subprocess.run(["podman", "image", "exists", image]).returncode != 0:
            return f"image {image} is missing: run `make images`"
    return None


_PROBLEM = _podman_problem() if os.environ.get("MULTIWORKER_SKIP_CONTAINERS") != "1" else "MULTIWORKER_SKIP_CONTAINERS=1"
requires_podman = pytest.mark.skipif(_PROBLEM is not None, reason=f"container tests: {_PROBLEM}")


def podman(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=600, check=check)


def leftovers(job_id: str) -> list[str]:
    """Containers and networks the job left behind."""
    containers = podman("ps", "-a", "-q", "--filter", f"label={LABEL}={job_id}").stdout.split()
    networks = [n for n in podman("network", "ls", "--format", "{{.Name}}").stdout.split() if n == f"mw-{job_id}"]
    return containers + networks


def running(job_id: str) -> list[str]:
    return podman("ps", "-q", "--filter", f"label={LABEL}={job_id}", "--filter", "status=running").stdout.split()


def nothing_left(job_id: str, timeout: float = 60) -> bool:
    try:
        wait_for(lambda: not leftovers(job_id), timeout=timeout, interval=0.5)
    except AssertionError:
        return False
    return True


@pytest.fixture(scope="module")
def mnist_image(tmp_path_factory) -> str:
    """The MNIST example's image, built by `multiworker build` on the Python + TensorFlow base."""
    home = tmp_path_factory.mktemp("build-home")
    proc = mw("build", str(JOB), "-t", MNIST, "--base", TF, "--pull", "never", home=home)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"built {MNIST} with podman" in proc.stdout  # the docker client here has no daemon: passed over
    return MNIST


@requires_podman
def test_mnist_two_worker_containers_kill_restart_and_resume(mnist_image, mw_home):
    """Two workers as containers on the job's network, one full epoch; worker-1's container is killed
    mid-epoch, the group restarts and resumes from the chief's backup; >= 98% test accuracy."""
    proc = mw("run", str(JOB), "--containers", "--image", mnist_image, "--pull", "never", "-q",
              "--inject-failure", "worker-1@step:150:KILL", "--set", "run_policy.backoff=1s",
              "--", "--epochs", "1", "--backup-every", "20", home=mw_home, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1, doc
    metrics = json.loads((Path(doc["output_dir"]) / "metrics.json").read_text())
    assert metrics["workers"] == 2 and metrics["test_accuracy"] >= 0.98, metrics
    after = [m["data"] for m in Store(mw_home).metrics(doc["id"], "epoch") if m["replica"] == "worker-0"
             and m["attempt"] == 1]
    assert after and (after[0].get("start_step") or 0) >= 20, f"did not resume from a backup: {after}"
    events = [e["message"] for e in Store(mw_home).events(doc["id"])]
    assert any("python -m trainer.task --epochs 1" in m for m in events), events  # what the container ran
    assert {r["host"] for r in doc["replicas"]} == {"mnist-worker-0", "mnist-worker-1"}
    assert nothing_left(doc["id"])


@requires_podman
def test_cancel_ctrl_c_and_a_killed_launcher_leave_no_container(mnist_image, mw_home):
    args = ["run", str(JOB), "--containers", "--image", mnist_image, "--pull", "never", "-q", "--",
            "--epochs", "1000", "--steps-per-epoch", "20"]
    detached = mw(*args[:1], "-d", *args[1:], home=mw_home)
    assert detached.returncode == 0, detached.stderr
    job_id = detached.stdout.split()[-1]
    wait_for(lambda: len(running(job_id)) == 2, timeout=240, interval=0.5)  # both containers up
    cancel = mw("cancel", job_id, home=mw_home)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    assert status(mw_home, job_id)["state"] == "Cancelled"
    assert nothing_left(job_id, timeout=10)

    seen = {job_id}
    for stop, state in ((signal.SIGINT, "Cancelled"), (signal.SIGKILL, "Lost")):
        launcher = mw_popen(*args, home=mw_home)
        try:
            job = wait_for(lambda: next((j for j in Store(mw_home).list_jobs() if j.id not in seen), None), timeout=300)
            seen.add(job.id)
            wait_for(lambda job_id=job.id: len(running(job_id)) == 2, timeout=240, interval=0.5)
            launcher.send_signal(stop)
            launcher.wait(timeout=300)
        finally:
            if launcher.poll() is None:
                launcher.kill()
        assert launcher.returncode == (130 if stop == signal.SIGINT else -signal.SIGKILL)
        assert nothing_left(job.id), f"containers left after {stop.name}: {leftovers(job.id)}"
        assert status(mw_home, job.id)["state"] == state


TFJOB = """
apiVersion: kubeflow.org/v1
kind: TFJob
metadata: {name: mnist-ps}
spec:
  runPolicy: {backoffLimit: 0}
  tfReplicaSpecs:
    Chief:
      replicas: 1
      template:
        spec:
          containers:
          - name: tensorflow
            image: IMAGE
            command: [python, -m, trainer.task]
            args: [--epochs, "1", --steps-per-epoch, "20"]
    Worker:
      replicas: 1
      template:
        spec:
          containers:
          - {name: tensorflow, image: IMAGE, command: [python, -m, trainer.task], args: [--epochs, "1", --steps-per-epoch, "20"]}
    PS:
      replicas: 1
      template:
        spec:
          containers:
          - {name: tensorflow, image: IMAGE, command: [python, -m, trainer.task], args: [--epochs, "1", --steps-per-epoch, "20"]}
"""


@requires_podman
def test_tfjob_naming_a_local_image_runs_unchanged_with_chief_worker_and_ps(mnist_image, mw_home, tmp_path):
    """The TFJob as a cluster gets it: its `image:` is the locally built one, no mapping flag."""
    path = tmp_path / "tfjob.yaml"
    path.write_text(TFJOB.replace("IMAGE", mnist_image))
    proc = mw("run", str(path), "--containers", "--pull", "never", "-q", home=mw_home, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    doc = status(mw_home)
    states = {r["name"]: r["state"] for r in doc["replicas"]}
    assert doc["state"] == "Succeeded" and states["chief-0"] == "Succeeded" and states["ps-0"] == "Stopped", states
    assert {r["name"]: r["host"] for r in doc["replicas"]} == {
        "chief-0": "mnist-ps-chief-0", "worker-0": "mnist-ps-worker-0", "ps-0": "mnist-ps-ps-0"}
    assert (Path(doc["output_dir"]) / "model").is_dir()
    assert nothing_left(doc["id"])


@requires_podman
def test_generated_jobset_pods_run_through_k8s_entry(mnist_image, mw_home, tmp_path):
    out = tmp_path / "jobset.yaml"
    conv = mw("convert", str(JOB), "--to", "jobset", "--image", mnist_image, "-o", str(out), home=mw_home)
    assert conv.returncode == 0, conv.stdout + conv.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["command"][:4] == \
        ["python", "-m", "multiworker.k8s_entry", "--"]
    proc = mw("run", str(out), "--containers", "--pull", "never", "-q", "--", "--epochs", "1",
              "--steps-per-epoch", "20", home=mw_home, timeout=600)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    status_doc = status(mw_home)
    assert status_doc["state"] == "Succeeded"
    metrics = json.loads((Path(status_doc["output_dir"]) / "metrics.json").read_text())
    assert metrics["workers"] == 2  # both pods joined one MultiWorkerMirroredStrategy cluster
    events = [e["message"] for e in Store(mw_home).events(status_doc["id"])]
    assert any("python -m multiworker.k8s_entry -- python -m trainer.task" in m for m in events), events
    assert {r["host"] for r in status_doc["replicas"]} == {"mnist-worker-0-0.mnist", "mnist-worker-0-1.mnist"}
    assert nothing_left(status_doc["id"])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def registry(tmp_path):
    """Debian's docker-registry on loopback with basic auth (htpasswd), and podman set to reach it over
    plain HTTP with an auth file of its own."""
    if shutil.which("docker-registry") is None or shutil.which("htpasswd") is None:
        pytest.skip("docker-registry and htpasswd (apache2-utils) are not installed (make images installs them)")
    port = _free_port()
    (tmp_path / "htpasswd").write_text(subprocess.run(["htpasswd", "-Bbn", "tester", "s3cret"], capture_output=True,
                                                      text=True, check=True).stdout)
    config = {"version": 0.1, "storage": {"filesystem": {"rootdirectory": str(tmp_path / "store")}},
              "http": {"addr": f"127.0.0.1:{port}"}, "log": {"level": "error"},
              "auth": {"htpasswd": {"realm": "test", "path": str(tmp_path / "htpasswd")}}}
    (tmp_path / "registry.yml").write_text(yaml.safe_dump(config))
    server = subprocess.Popen(["docker-registry", "serve", str(tmp_path / "registry.yml")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    conf = tmp_path / "registries.conf"
    conf.write_text(f'[[registry]]\nlocation = "localhost:{port}"\ninsecure = true\n')
    env = {"CONTAINERS_REGISTRIES_CONF": str(conf), "REGISTRY_AUTH_FILE": str(tmp_path / "auth.json")}
    try:
        wait_for(lambda: socket.socket().connect_ex(("127.0.0.1", port)) == 0, timeout=30)
        yield f"localhost:{port}", env
    finally:
        server.terminate()
        server.wait(timeout=30)


HELLO = """#!/bin/sh
echo "replica $MULTIWORKER_REPLICA on $(hostname): TF_CONFIG=$TF_CONFIG args=$*"
for a in "$@"; do [ -f "$a" ] && echo "read $a: $(cat "$a")"; done; exit 0
"""


@requires_podman
def test_push_to_a_registry_with_basic_auth_and_run_the_pushed_image(registry, mw_home, tmp_path):
    """A user's Dockerfile built as it is and pushed; without credentials the push is one line; the
    pushed image, gone from the local store, is pulled back and runs (its ENTRYPOINT, as on Kubernetes)."""
    address, env = registry
    image = f"{address}/hello:1"
    (tmp_path / "hello.sh").write_text(HELLO)
    (tmp_path / "Dockerfile").write_text(f"FROM {BASE}\nCOPY hello.sh /hello.sh\nENTRYPOINT [\"/bin/sh\", \"/hello.sh\"]\n"
                                         "CMD [\"--default\"]\n")
    (tmp_path / "job.yaml").write_text(f"name: hello\nimage: {image}\nargs: [gs://bucket/in/data.txt]\n"
                                       "pools:\n  worker:\n    replicas: 2\n")
    data = tmp_path / "gcs"
    (data / "in").mkdir(parents=True)
    (data / "in" / "data.txt").write_text("mapped-ok")
    refused = mw("build", str(tmp_path / "job.yaml"), "--push", "--pull", "never", home=mw_home, env=env)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    error = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(error) == 1 and f"podman push {image} failed" in error[0] and "log in first" in error[0], refused.stderr
    login = subprocess.run(["podman", "login", "-u", "tester", "--password-stdin", address], input="s3cret",
                           capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    assert login.returncode == 0, login.stderr
    pushed = mw("build", str(tmp_path / "job.yaml"), "--push", "--pull", "never", home=mw_home, env=env)
    assert pushed.returncode == 0 and f"pushed {image}" in pushed.stdout, pushed.stdout + pushed.stderr
    podman("rmi", image)
    missing = mw("run", str(tmp_path / "job.yaml"), "--containers", "--pull", "never", home=mw_home, env=env)
    error = [line for line in missing.stderr.splitlines() if line.strip()]
    assert missing.returncode == 2 and len(error) == 1, missing.stdout + missing.stderr
    assert f"image {image}: not in podman's local store (--pull never); build it with `multiworker build" in error[0]
    try:
        proc = mw("run", str(tmp_path / "job.yaml"), "--containers", "--map-path", f"gs://bucket={data}", "--",
                  "--epochs", "1", home=mw_home, env=env)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        doc = status(mw_home)
        log = (Path(doc["output_dir"]).parent / "attempt_0" / "worker-1.log").read_text()
        assert "replica worker-1 on hello-worker-1: TF_CONFIG=" in log, log
        assert f"args={data}/in/data.txt --epochs 1" in log  # spec args replace CMD; trainer args follow
        assert f"read {data}/in/data.txt: mapped-ok" in log  # the --map-path directory, bind-mounted
        config = json.loads(log.split("TF_CONFIG=")[1].split(" args=")[0])
        assert config["cluster"] == {"worker": ["hello-worker-0:2222", "hello-worker-1:2222"]}
        assert nothing_left(doc["id"])
        # AI Platform's rule: the master image's ENTRYPOINT with the user args after `--` (CMD dropped)
        line = ["gcloud", "ai-platform", "jobs", "submit", "training", "hello_aip", "--region", "us-central1",
                "--master-image-uri", image, "--containers", "--pull", "never", "--", "--epochs", "3"]
        aip = mw(*line, home=mw_home, env=env)
        assert aip.returncode == 0, aip.stdout[-3000:] + aip.stderr[-2000:]
        doc = status(mw_home)
        log = (Path(doc["output_dir"]).parent / "attempt_0" / "chief-0.log").read_text()
        # AI Platform sets TF_CONFIG on every VM, one-replica jobs too, with the chief as `master`
        config = json.loads(log.split("TF_CONFIG=")[1].split(" args=")[0])
        assert config["cluster"] == {"master": ["hello-aip-master-0:2222"]}, log
        assert config["task"] == {"type": "master", "index": 0} and "args=--epochs 3" in log, log
    finally:
        podman("rmi", "-f", image, check=False)
