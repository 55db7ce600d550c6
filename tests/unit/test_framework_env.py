"""Each framework's launcher variables, per platform form, against the table in docs/frameworks.md."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from multiworker import k8s_entry
from multiworker.cluster import replica_env, replica_ids
from multiworker.errors import SpecError
from multiworker.framework_env import framework_env, uses_torchrun, vertex_members
from multiworker.spec.formats import parse_job
from multiworker.spec.formats.convert import convert
from multiworker.spec.load import spec_from_dict

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "docs" / "frameworks.md"


def documented() -> dict[str, set[str]]:
    """Column (jax, pytorch, torchrun) -> the variables the docs' table marks for it."""
    rows = [line.split("|")[1:-1] for line in TABLE.read_text().splitlines() if line.startswith("| `")]
    out: dict[str, set[str]] = {"jax": set(), "pytorch": set(), "torchrun": set()}
    for cells in rows:
        name = re.fullmatch(r"\s*`([A-Z_]+)`\s*", cells[0])
        if not name or len(cells) < 4:
            continue
        for column, cell in zip(("jax", "pytorch", "torchrun"), cells[1:4]):
            if cell.strip() == "yes":
                out[column].add(name.group(1))
    return out


def spec(framework: str, chief: bool = False, workers: int = 2, command: str | None = None):
    pools = {"worker": {"replicas": workers}}
    if chief:
        pools["chief"] = {"replicas": 1}
    program = {"command": command} if command else {"module": "trainer.task"}
    return spec_from_dict({"name": "j", "framework": framework, **program, "pools": pools}, source="t")


def local_env(s) -> dict[str, dict[str, str]]:
    addresses = {r: f"10.0.0.{i + 1}:{2000 + i}" for i, r in enumerate(replica_ids(s))}
    return {r.name: replica_env(s, r, addresses, job_id="j", attempt=0, output_dir="/o") for r in replica_ids(s)}


FRAMEWORK_VARS = re.compile(r"^(JAX_|KERAS_DISTRIBUTION_|MASTER_|WORLD_SIZE$|RANK$|LOCAL_RANK$|PET_)")


def framework_vars(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if FRAMEWORK_VARS.match(k)}


@pytest.mark.parametrize(("framework", "column", "command"), [
    ("jax", "jax", None), ("pytorch", "pytorch", None), ("pytorch", "torchrun", "torchrun --standalone train.py"),
    ("pytorch", "torchrun", "python -m torch.distributed.run train.py"),
], ids=["jax", "pytorch", "torchrun", "torch.distributed.run"])
def test_local_env_names_are_the_tables(framework, column, command):
    envs = local_env(spec(framework, chief=True, command=command))
    for env in envs.values():
        assert set(framework_vars(env)) == documented()[column]


def test_tensorflow_jobs_get_none_of_them():
    for env in local_env(spec("tensorflow")).values():
        assert framework_vars(env) == {} and "MULTIWORKER_PRELOAD" not in env and "TF_CONFIG" in env


def test_pytorch_values_follow_pytorchjob_ranks():
    """Master (the chief) rank 0, worker i rank i+1; everyone meets at the chief's address."""
    envs = local_env(spec("pytorch", chief=True, workers=2))
    want = {"chief-0": 0, "worker-0": 1, "worker-1": 2}
    for name, rank in want.items():
        assert framework_vars(envs[name]) == {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "2000", "WORLD_SIZE": "3",
                                              "RANK": str(rank), "LOCAL_RANK": "0"}
        assert envs[name]["MULTIWORKER_PRELOAD"] == "0"


def test_jax_values_without_a_chief_make_worker_0_the_coordinator():
    envs = local_env(spec("jax", workers=2))
    assert framework_vars(envs["worker-1"]) == {
        "JAX_COORDINATOR_ADDRESS": "10.0.0.1:2000", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "1",
        "KERAS_DISTRIBUTION_JOB_ADDRESSES": "10.0.0.1:2000,10.0.0.2:2001", "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
        "KERAS_DISTRIBUTION_PROCESS_ID": "1"}


def test_torchrun_gets_pet_arguments():
    env = framework_vars(local_env(spec("pytorch", chief=True, workers=1, command="torchrun train.py"))["worker-0"])
    assert {k: v for k, v in env.items() if k.startswith("PET_")} == {
        "PET_MASTER_ADDR": "10.0.0.1", "PET_MASTER_PORT": "2000", "PET_NNODES": "2", "PET_NODE_RANK": "1",
        "PET_NPROC_PER_NODE": "1"}


def test_the_specs_env_wins():
    s = spec_from_dict({"name": "j", "framework": "pytorch", "module": "m", "env": {"MASTER_PORT": "29500"},
                        "pools": {"worker": {"replicas": 2}}}, source="t")
    assert {e["MASTER_PORT"] for e in local_env(s).values()} == {"29500"}


def test_ipv6_master_addr_is_bare():
    env = framework_env("pytorch", {"worker-0": "[::1]:5000", "worker-1": "[::1]:5001"}, "worker-1")
    assert env["MASTER_ADDR"] == "::1" and env["MASTER_PORT"] == "5000"


@pytest.mark.parametrize("argv,expected", [
    (["torchrun", "x.py"], True), (["/usr/bin/torchrun"], True), (["python", "-m", "torch.distributed.run"], True),
    (["python", "-m", "trainer.task"], False), (["python", "torchrun.py"], False), ([], False)])
def test_uses_torchrun(argv, expected):
    assert uses_torchrun(argv) is expected


@pytest.mark.parametrize("framework,role", [("jax", "ps"), ("pytorch", "evaluator")])
def test_parameter_servers_and_evaluators_are_refused(framework, role):
    pools = {"chief": {"replicas": 1}, "worker": {"replicas": 1}, role: {"replicas": 1}}
    with pytest.raises(SpecError, match=f"pools.{role}: .*set `framework: tensorflow`"):
        spec_from_dict({"name": "j", "framework": framework, "module": "m", "pools": pools}, source="t")


def test_unknown_framework_is_refused():
    with pytest.raises(SpecError, match="framework"):
        spec_from_dict({"name": "j", "framework": "mxnet", "module": "m", "pools": {"worker": {"replicas": 1}}},
                       source="t")


def _converted(framework: str, to: str, command: str | None = None) -> dict:
    native = {"name": "j", "framework": framework, "image": "img", "pools": {"worker": {"replicas": 3}}}
    native.update({"command": command} if command else {"module": "trainer.task"})
    parsed = parse_job("job.yaml", data=native)
    doc, _ = convert(parsed, to, source="job.yaml")
    return doc


@pytest.mark.parametrize("framework,column,command", [("jax", "jax", None), ("pytorch", "pytorch", None),
                                                      ("pytorch", "torchrun", "torchrun train.py")])
def test_jobset_pods_get_the_tables_variables(framework, column, command):
    doc = _converted(framework, "jobset", command)
    container = doc["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    pod = {e["name"]: e["value"] for e in container["env"]}
    envs = [k8s_entry.pod_env({**pod, "JOB_COMPLETION_INDEX": str(i)}) for i in range(3)]
    for env in envs:
        assert set(framework_vars(env)) == documented()[column]
    if framework == "pytorch":
        assert [e["RANK"] for e in envs] == ["0", "1", "2"]
        assert {e["MASTER_ADDR"] for e in envs} == {"j-worker-0-0.j"} and envs[0]["MASTER_PORT"] == "2222"
    # read back: the framework, and no MW_* or entry in the program
    back = parse_job("j.yaml", data=doc).native
    assert back["framework"] == framework and "env" not in back


@pytest.mark.parametrize("framework,column", [("jax", "jax"), ("pytorch", "pytorch")])
def test_vertex_entry_adds_the_tables_variables_from_cluster_spec(framework, column, tmp_path):
    doc = _converted(framework, "vertex")
    pools = doc["jobSpec"]["workerPoolSpecs"]
    command = pools[1]["containerSpec"]["command"]
    assert command[:4] == ["python", "-m", "multiworker.framework_env", "--"]
    pod = {e["name"]: e["value"] for e in pools[1]["containerSpec"]["env"]}
    cluster = {"cluster": {"workerpool0": ["cmle-training-workerpool0-x-0:2222"],
                           "workerpool1": ["w-0:2222", "w-1:2222"]},
               "environment": "cloud", "task": {"type": "workerpool1", "index": 1}}
    # the entry runs as Vertex would start it, and execs the program (here: print the environment)
    out = subprocess.run([sys.executable, "-m", "multiworker.framework_env", "--", sys.executable, "-c",
                          "import json, os; print(json.dumps(dict(os.environ)))"],
                         env={**pod, "CLUSTER_SPEC": json.dumps(cluster), "PATH": "/usr/bin:/bin",
                              "PYTHONPATH": str(REPO / "src"), "MASTER_PORT": "1234"},
                         capture_output=True, text=True, check=True)
    env = json.loads(out.stdout)
    assert set(framework_vars(env)) == documented()[column] | ({"MASTER_PORT"} if framework == "jax" else set())
    if framework == "pytorch":
        assert env["RANK"] == "2" and env["MASTER_ADDR"] == "cmle-training-workerpool0-x-0"
        assert env["MASTER_PORT"] == "1234"  # what Vertex AI set itself wins
    else:
        assert env["JAX_PROCESS_ID"] == "2" and env["JAX_COORDINATOR_ADDRESS"] == "cmle-training-workerpool0-x-0:2222"
    back = parse_job("v.yaml", data=doc).native
    assert back["framework"] == framework and back["module"] == "trainer.task"


def test_vertex_members_maps_pools_to_processes():
    members, me = vertex_members({"cluster": {"workerpool0": ["a:1"], "workerpool1": ["b:1"], "workerpool2": ["p:1"]},
                                  "task": {"type": "workerpool0", "index": 0}})
    assert members == {"chief-0": "a:1", "worker-0": "b:1"} and me == "chief-0"


def test_pytorchjob_manifest_is_what_the_operator_reads():
    doc = _converted("pytorch", "pytorchjob")
    specs = doc["spec"]["pytorchReplicaSpecs"]
    assert doc["kind"] == "PyTorchJob" and {k: v["replicas"] for k, v in specs.items()} == {"Master": 1, "Worker": 2}
    for replica in specs.values():
        container = replica["template"]["spec"]["containers"][0]
        assert container["name"] == "pytorch"
        assert container["ports"] == [{"name": "pytorchjob-port", "containerPort": 23456}]


@pytest.mark.parametrize("framework,to", [("jax", "pytorchjob"), ("tensorflow", "pytorchjob"), ("pytorch", "tfjob"),
                                          ("jax", "tfjob"), ("jax", "aiplatform")])
def test_formats_that_cannot_carry_the_framework_say_which_can(framework, to):
    with pytest.raises(SpecError, match=r"framework: is .* convert with --to .*jobset"):
        _converted(framework, to)


def test_native_round_trip_keeps_the_field():
    doc = _converted("jax", "native")
    assert doc["framework"] == "jax"
    assert yaml.safe_load(yaml.safe_dump(doc))["framework"] == "jax"
