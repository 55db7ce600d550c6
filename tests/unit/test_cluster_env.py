"""TF_CONFIG, CLUSTER_SPEC and AIP_* for each replica, against golden dicts."""

from __future__ import annotations

import json

import pytest

from multiworker.cluster import (
    ReplicaId,
    cluster_map,
    cluster_spec,
    replica_env,
    replica_ids,
    tf_config,
    thread_budget,
)
from multiworker.spec.model import JobSpec


def make(pools: dict, **extra) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "module": "trainer.task", "pools": pools, **extra})


def addresses_for(spec: JobSpec, hosts: tuple[str, ...] = ("127.0.0.1",)) -> dict[ReplicaId, str]:
    """Replica i listens on port 2000 + i of host i mod len(hosts)."""
    return {rid: f"{hosts[i % len(hosts)]}:{2000 + i}" for i, rid in enumerate(replica_ids(spec))}


def env_of(spec, role, index, **kw):
    return replica_env(spec, ReplicaId(role, index), addresses_for(spec), job_id="abc", attempt=1, output_dir="/out", cores=8, **kw)


def test_chief_and_workers():
    spec = make({"chief": {}, "worker": {"replicas": 2}})
    env = env_of(spec, "worker", 1)
    assert json.loads(env["TF_CONFIG"]) == {
        "cluster": {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "127.0.0.1:2002"]},
        "task": {"type": "worker", "index": 1},
        "environment": "cloud",
    }
    assert json.loads(env["CLUSTER_SPEC"]) == {
        "cluster": {"workerpool0": ["127.0.0.1:2000"], "workerpool1": ["127.0.0.1:2001", "127.0.0.1:2002"]},
        "environment": "cloud",
        "task": {"type": "workerpool1", "index": 1},
    }
    assert {k: env[k] for k in ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR")} == {
        "AIP_MODEL_DIR": "/out/model",
        "AIP_CHECKPOINT_DIR": "/out/checkpoints",
        "AIP_TENSORBOARD_LOG_DIR": "/out/logs",
    }
    assert env["MULTIWORKER_JOB_ID"] == "abc" and env["MULTIWORKER_ATTEMPT"] == "1"
    assert env["TF_USE_LEGACY_KERAS"] == "1"


def test_workers_only():
    spec = make({"worker": {"replicas": 3}})
    cfg = json.loads(env_of(spec, "worker", 0)["TF_CONFIG"])
    assert cfg == {
        "cluster": {"worker": ["127.0.0.1:2000", "127.0.0.1:2001", "127.0.0.1:2002"]},
        "task": {"type": "worker", "index": 0},
        "environment": "cloud",
    }
    # Vertex has no chief-less jobs: worker 0 is the primary pool.
    assert json.loads(env_of(spec, "worker", 2)["CLUSTER_SPEC"]) == {
        "cluster": {"workerpool0": ["127.0.0.1:2000"], "workerpool1": ["127.0.0.1:2001", "127.0.0.1:2002"]},
        "environment": "cloud",
        "task": {"type": "workerpool1", "index": 1},
    }


def test_chief_workers_ps():
    spec = make({"chief": {}, "worker": {"replicas": 2}, "ps": {"replicas": 1}})
    cfg = json.loads(env_of(spec, "ps", 0)["TF_CONFIG"])
    assert cfg == {
        "cluster": {
            "chief": ["127.0.0.1:2000"],
            "worker": ["127.0.0.1:2001", "127.0.0.1:2002"],
            "ps": ["127.0.0.1:2003"],
        },
        "task": {"type": "ps", "index": 0},
        "environment": "cloud",
    }
    assert json.loads(env_of(spec, "ps", 0)["CLUSTER_SPEC"])["task"] == {"type": "workerpool2", "index": 0}


def test_evaluator_outside_cluster():
    spec = make({"chief": {}, "worker": {"replicas": 1}, "evaluator": {"replicas": 1}})
    cfg = json.loads(env_of(spec, "evaluator", 0)["TF_CONFIG"])
    assert cfg == {
        "cluster": {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001"]},
        "task": {"type": "evaluator", "index": 0},
        "environment": "cloud",
    }
    spec_doc = json.loads(env_of(spec, "evaluator", 0)["CLUSTER_SPEC"])
    assert spec_doc["cluster"]["workerpool3"] == ["127.0.0.1:2002"]
    assert spec_doc["task"] == {"type": "workerpool3", "index": 0}


def test_master_task_type():
    spec = make({"chief": {}, "worker": {"replicas": 1}}, chief_task_type="master")
    cfg = json.loads(env_of(spec, "chief", 0)["TF_CONFIG"])
    assert cfg["task"] == {"type": "master", "index": 0}
    assert "master" in cfg["cluster"] and "chief" not in cfg["cluster"]


def test_single_replica_has_no_tf_config():
    spec = make({"worker": {"replicas": 1}})
    env = env_of(spec, "worker", 0)
    assert "TF_CONFIG" not in env and "CLUSTER_SPEC" not in env
    assert tf_config(spec, ReplicaId("worker", 0), cluster_map(spec, addresses_for(spec))) is None
    assert env["AIP_MODEL_DIR"] == "/out/model"


@pytest.mark.parametrize("pools,cores,expected", [
    ({"worker": {"replicas": 2}}, 8, 4),
    ({"worker": {"replicas": 4}}, 2, 1),
    ({"chief": {}, "worker": {"replicas": 2}, "ps": {}}, 16, 4),
])
def test_thread_budget(pools, cores, expected):
    spec = make(pools)
    assert thread_budget(spec, cores) == expected
    env = replica_env(spec, replica_ids(spec)[0], addresses_for(spec), job_id="a", attempt=0, output_dir="/o", cores=cores)
    assert env["MULTIWORKER_THREADS"] == env["TF_NUM_INTRAOP_THREADS"] == env["OMP_NUM_THREADS"] == str(expected)


def test_thread_budget_override_and_spec_env_wins():
    spec = make({"worker": {"replicas": 2, "env": {"OMP_NUM_THREADS": "7"}}}, threads_per_replica=3)
    env = env_of(spec, "worker", 0)
    assert env["MULTIWORKER_THREADS"] == "3" and env["OMP_NUM_THREADS"] == "7"


def test_spec_can_set_legacy_keras():
    spec = make({"worker": {"replicas": 2}}, env={"TF_USE_LEGACY_KERAS": "0"})
    assert env_of(spec, "worker", 0)["TF_USE_LEGACY_KERAS"] == "0"


def test_cluster_spec_positions_with_chief():
    spec = make({"chief": {}, "worker": {"replicas": 1}})
    assert cluster_spec(spec, ReplicaId("chief", 0), addresses_for(spec))["task"] == {"type": "workerpool0", "index": 0}


def test_addresses_on_several_hosts():
    """Each replica's own host:port goes into TF_CONFIG and CLUSTER_SPEC (replicas on two hosts)."""
    spec = make({"chief": {}, "worker": {"replicas": 2}, "ps": {"replicas": 1}})
    addresses = addresses_for(spec, ("10.0.0.1", "10.0.0.2"))
    env = replica_env(spec, ReplicaId("worker", 0), addresses, job_id="abc", attempt=0, output_dir="/out", cores=8)
    assert json.loads(env["TF_CONFIG"])["cluster"] == {
        "chief": ["10.0.0.1:2000"], "worker": ["10.0.0.2:2001", "10.0.0.1:2002"], "ps": ["10.0.0.2:2003"]}
    assert json.loads(env["CLUSTER_SPEC"])["cluster"] == {
        "workerpool0": ["10.0.0.1:2000"], "workerpool1": ["10.0.0.2:2001", "10.0.0.1:2002"],
        "workerpool2": ["10.0.0.2:2003"]}


def test_the_launchers_identity_wins_over_the_spec_env():
    """A spec that sets MULTIWORKER_JOB_ID would hide its replicas from cancel, the watchdog and Lost cleanup."""
    spec = make({"worker": {"replicas": 2}}, env={"MULTIWORKER_JOB_ID": "other", "MULTIWORKER_REPLICA": "x-9",
                                                 "MULTIWORKER_ATTEMPT": "7", "OMP_NUM_THREADS": "5"})
    env = env_of(spec, "worker", 1)
    assert (env["MULTIWORKER_JOB_ID"], env["MULTIWORKER_REPLICA"], env["MULTIWORKER_ATTEMPT"]) == ("abc", "worker-1", "1")
    assert env["OMP_NUM_THREADS"] == "5"  # the spec still wins for everything else


def test_replicas_get_the_pooling_cpu_allocator_unless_the_spec_says_otherwise():
    """TF_CPU_ALLOCATOR_USE_BFC=1 is what makes MultiWorkerMirroredStrategy 1.6x faster on CPU (BENCHMARKS.md)."""
    assert env_of(make({"worker": {"replicas": 2}}), "worker", 0)["TF_CPU_ALLOCATOR_USE_BFC"] == "1"
    spec = make({"worker": {"replicas": 2, "env": {"TF_CPU_ALLOCATOR_USE_BFC": "0"}}})
    assert env_of(spec, "worker", 1)["TF_CPU_ALLOCATOR_USE_BFC"] == "0"
