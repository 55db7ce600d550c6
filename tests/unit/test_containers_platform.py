"""The pure parts of running replicas as containers: hostnames per platform, the entry-point rule,
a JobSet pod's variables, the generated Dockerfile, and finding an engine that works."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from multiworker.cluster import ReplicaId
from multiworker.containers import engine as engines
from multiworker.containers.images import default_tag, generated_dockerfile
from multiworker.containers.platform import JOBSET_ENTRY, container_argv, hosts, platform_env
from multiworker.errors import UserError
from multiworker.k8s_entry import pod_env
from multiworker.spec.load import spec_from_dict
from multiworker.spec.model import Program


def spec(pools: dict, **fields):
    return spec_from_dict({"name": "Mnist_Job", "module": "trainer.task", "pools": pools, **fields}, source="job.yaml")


def test_hostnames_are_the_platforms():
    job = spec({"chief": {"replicas": 1}, "worker": {"replicas": 2}, "ps": {"replicas": 1}})
    tfjob = {r.name: h.address for r, h in hosts(job, "tfjob").items()}
    assert tfjob == {"chief-0": "mnist-job-chief-0", "worker-0": "mnist-job-worker-0", "worker-1": "mnist-job-worker-1",
                     "ps-0": "mnist-job-ps-0"}
    vertex = {r.name: h.address for r, h in hosts(job, "vertex").items()}
    assert vertex == {"chief-0": "workerpool0-0", "worker-0": "workerpool1-0", "worker-1": "workerpool1-1",
                      "ps-0": "workerpool2-0"}
    workers = spec({"worker": {"replicas": 3}})  # no chief: worker 0 is Vertex AI's pool 0
    assert [h.address for h in hosts(workers, "vertex").values()] == ["workerpool0-0", "workerpool1-0", "workerpool1-1"]
    jobset = hosts(workers, "jobset")[ReplicaId("worker", 2)]
    assert (jobset.hostname, jobset.address) == ("mnist-job-worker-0-2", "mnist-job-worker-0-2.mnist-job")
    master = spec({"chief": {"replicas": 1}}, chief_task_type="master")
    assert hosts(master, "aiplatform")[ReplicaId("chief", 0)].address == "mnist-job-master-0"


IMAGE = {"Entrypoint": ["python"], "Cmd": ["trainer/task.py"]}


@pytest.mark.parametrize("program, trainer_args, expect", [
    (Program(), [], ["python", "trainer/task.py"]),  # ENTRYPOINT + CMD
    (Program(args=["--epochs", "1"]), [], ["python", "--epochs", "1"]),  # args replace CMD
    (Program(), ["--epochs", "2"], ["python", "--epochs", "2"]),  # the user args of AI Platform's master image
    (Program(command=["sh", "-c", "env"]), [], ["sh", "-c", "env"]),  # command replaces ENTRYPOINT, drops CMD
    (Program(module="trainer.task", args=["--x"]), ["--y"], ["python", "-m", "trainer.task", "--x", "--y"]),
], ids=["entrypoint-cmd", "args", "trainer-args", "command", "module"])
def test_entry_point_rule(program, trainer_args, expect):
    assert container_argv(program, "img", IMAGE, trainer_args) == expect


def test_entry_point_errors_and_jobset_wrapper():
    with pytest.raises(UserError, match="image img has no ENTRYPOINT or CMD and the pool sets no command"):
        container_argv(Program(), "img", {}, [])
    assert container_argv(Program(module="trainer.task"), "img", {}, [], jobset=True) == \
        [*JOBSET_ENTRY, "python", "-m", "trainer.task"]
    with pytest.raises(UserError, match="wraps its command in multiworker.k8s_entry"):
        container_argv(Program(), "img", IMAGE, [], jobset=True)


def test_jobset_pod_env_gives_k8s_entry_the_clusters_tf_config():
    job = spec({"worker": {"replicas": 2}})
    host_of = hosts(job, "jobset")
    env = platform_env(job, "jobset", ReplicaId("worker", 1), host_of)
    assert env["JOB_COMPLETION_INDEX"] == "1" and env["MW_ROLE"] == "worker"
    config = json.loads(pod_env(env)["TF_CONFIG"])
    assert config["cluster"] == {"worker": ["mnist-job-worker-0-0.mnist-job:2222", "mnist-job-worker-0-1.mnist-job:2222"]}
    assert config["task"] == {"type": "worker", "index": 1}
    assert platform_env(job, "tfjob", ReplicaId("worker", 1), host_of) == {}


def test_generated_dockerfile_and_default_tag():
    text = generated_dockerfile("tensorflow/tensorflow:2.21.0", "2.21.0", ["pydantic>=2.6"], ca=True)
    assert text.splitlines()[2] == "FROM tensorflow/tensorflow:2.21.0"
    assert 'pip install -q --no-deps "tf-keras==2.21.0"' in text  # or it pulls a second TensorFlow
    assert "WORKDIR /app" in text and "COPY app/ /app/" in text and "host-ca-certificates.crt" in text
    assert default_tag("My Job", None) == "my-job:latest" and default_tag("x", "gcr.io/p/x:1") == "gcr.io/p/x:1"


def _fake(bin_dir: Path, name: str, code: int, out: str = "") -> None:
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\necho '{out}' >&2\nexit {code}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_an_engine_on_path_that_does_not_answer_is_passed_over(tmp_path, monkeypatch):
    """A docker client without a daemon is not a builder; podman that answers is."""
    _fake(tmp_path, "docker", 1, "Cannot connect to the Docker daemon at unix:///var/run/docker.sock")
    _fake(tmp_path, "podman", 0)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv(engines.ENGINE_ENV, raising=False)
    engines._probe.cache_clear()
    try:
        assert engines.find_engine(engines.BUILDERS, purpose="build images").name == "podman"
        _fake(tmp_path, "podman", 125, "Error: cannot set up namespaces")
        engines._probe.cache_clear()
        with pytest.raises(UserError) as info:
            engines.find_engine(engines.BUILDERS, purpose="build images")
        message = str(info.value)
        assert "docker: Cannot connect to the Docker daemon" in message and "podman: Error: cannot set up" in message
        assert "buildah: not installed" in message and "\n" not in message
    finally:
        engines._probe.cache_clear()
        os.environ.pop(engines.ENGINE_ENV, None)
