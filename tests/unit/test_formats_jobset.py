"""``convert --to jobset``: golden manifests, CRD schema checks, read-back, name limits, in-pod entry point."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from multiworker.errors import SpecError
from multiworker.k8s_entry import EntryError, pod_env
from multiworker.spec.formats import parse_job
from multiworker.spec.formats.convert import convert
from multiworker.spec.formats.schema import check_schema
from multiworker.spec.load import apply_overrides, spec_from_dict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "jobset"
CLOUD = FIXTURES.parent / "cloud"


def to_jobset(path: Path, image: str | None = "gcr.io/p/t:v1", **kw):
    return convert(parse_job(path), "jobset", source=str(path), image=image, **kw)


@pytest.mark.parametrize("name", ["all_roles", "workers_only"])
def test_golden(name):
    doc, _ = to_jobset(FIXTURES / f"{name}.yaml")
    assert doc == yaml.safe_load((FIXTURES / f"{name}.jobset.yaml").read_text())
    check_schema(doc, "jobset", source=name)


def test_all_roles_policy_and_hostnames():
    doc, notes = to_jobset(FIXTURES / "all_roles.yaml")
    spec = doc["spec"]
    assert [j["name"] for j in spec["replicatedJobs"]] == ["chief", "worker", "ps", "evaluator"]
    assert spec["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["chief"]}
    assert spec["failurePolicy"]["maxRestarts"] == 2
    assert {r["name"]: r["onJobFailureReasons"] for r in spec["failurePolicy"]["rules"]} == {
        "program-error": ["PodFailurePolicy"], "deadline": ["DeadlineExceeded"]}
    worker = spec["replicatedJobs"][1]["template"]["spec"]
    assert (worker["parallelism"], worker["completions"], worker["completionMode"], worker["backoffLimit"]) == (
        2, 2, "Indexed", 0)
    assert worker["activeDeadlineSeconds"] == 3600
    codes = worker["podFailurePolicy"]["rules"][0]["onExitCodes"]
    assert codes["values"] == list(range(1, 128)) and codes["operator"] == "In"
    env = {e["name"]: e.get("value") for e in worker["template"]["spec"]["containers"][0]["env"]}
    assert json.loads(env["MW_CLUSTER"])["worker"] == ["mnist-worker-0-0.mnist:2222", "mnist-worker-0-1.mnist:2222"]
    assert spec["network"] == {"enableDNSHostnames": True, "subdomain": "mnist", "publishNotReadyAddresses": True}
    assert any("evaluator stops" in n for n in notes)


@pytest.mark.parametrize("policy,max_restarts,rules", [
    ("Never", 0, False), ("OnFailure", 4, False), ("Always", 4, False), ("ExitCode", 4, True),
], ids=["never", "onfailure", "always", "exitcode"])
def test_restart_policy_maps_to_failure_policy(tmp_path, policy, max_restarts, rules):
    path = tmp_path / "j.yaml"
    path.write_text(f"name: j\nmodule: m\npools: {{worker: {{replicas: 2}}}}\n"
                    f"run_policy: {{restart_policy: {policy}, backoff_limit: 4}}\n")
    doc, _ = to_jobset(path)
    assert doc["spec"]["failurePolicy"].get("maxRestarts") == max_restarts
    assert ("rules" in doc["spec"]["failurePolicy"]) is rules
    back = spec_from_dict(parse_job(path, format="jobset", data=copy.deepcopy(doc)).native, source="x")
    assert back.run_policy.restart_policy == ("OnFailure" if policy == "Always" else policy)


def test_all_workers_success_targets_chief_and_worker(tmp_path):
    path = tmp_path / "j.yaml"
    path.write_text("name: j\nmodule: m\npools: {chief: {}, worker: {replicas: 2}}\n"
                    "run_policy: {success_policy: all_workers}\n")
    doc, _ = to_jobset(path)
    assert doc["spec"]["successPolicy"]["targetReplicatedJobs"] == ["chief", "worker"]
    assert "successPolicy" not in doc["spec"]["replicatedJobs"][1]["template"]["spec"]
    back = spec_from_dict(parse_job(path, format="jobset", data=copy.deepcopy(doc)).native, source="x")
    assert back.run_policy.success_policy == "all_workers"


@pytest.mark.parametrize("name", ["all_roles", "workers_only"])
def test_read_back_keeps_meaning(name):
    source = FIXTURES / f"{name}.yaml"
    original = spec_from_dict(parse_job(source).native, source=str(source))
    doc, _ = to_jobset(source)
    back = spec_from_dict(parse_job(source, format="jobset", data=copy.deepcopy(doc)).native, source="x")
    assert back.replica_counts() == original.replica_counts()
    assert back.run_policy.restart_policy == original.run_policy.restart_policy
    assert back.output_dir == original.output_dir
    for role in original.replica_counts():
        assert back.resolved(role).args == original.resolved(role).args
        assert (back.resolved(role).module, back.resolved(role).command) == (
            original.resolved(role).module, original.resolved(role).command)


def test_jobset_file_is_detected_and_loads(tmp_path):
    path = tmp_path / "js.yaml"
    path.write_text((FIXTURES / "workers_only.jobset.yaml").read_text())
    parsed = parse_job(path)
    assert parsed.format == "jobset" and parsed.native["pools"]["worker"]["replicas"] == 3


def test_name_too_long_is_one_line_error(tmp_path):
    path = tmp_path / "j.yaml"
    path.write_text(f"name: {'a' * 55}\nmodule: m\npools: {{worker: {{replicas: 12}}}}\n")
    with pytest.raises(SpecError, match=r"name: .*67 characters; Kubernetes allows 63: shorten the name to 51 "):
        to_jobset(path)


def test_missing_image_names_the_field(tmp_path):
    path = tmp_path / "j.yaml"
    path.write_text("name: j\nmodule: m\npools: {worker: {replicas: 2}}\n")
    with pytest.raises(SpecError, match="image: pool worker .* has no container image; pass --image"):
        to_jobset(path, image=None)


def test_local_output_dir_is_refused(tmp_path):
    path = tmp_path / "j.yaml"
    path.write_text("name: j\nmodule: m\noutput_dir: out\npools: {worker: {replicas: 2}}\n")
    with pytest.raises(SpecError, match="output_dir: out is a local path; JobSet needs"):
        to_jobset(path)


def test_schema_rejects_a_bad_jobset():
    doc, _ = to_jobset(FIXTURES / "workers_only.yaml")
    bad = copy.deepcopy(doc)
    bad["spec"]["failurePolicy"]["rules"] = [{"name": "x", "action": "Explode"}]
    with pytest.raises(SpecError, match=r"spec\.failurePolicy\.rules\[0\]\.action: 'Explode' is not one of"):
        check_schema(bad, "jobset", source="j.yaml")
    bad = copy.deepcopy(doc)
    bad["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelizm"] = 2
    with pytest.raises(SpecError, match="parallelizm"):
        check_schema(bad, "jobset", source="j.yaml")


@pytest.mark.parametrize("name", ["vertex_config.yaml", "tfjob.yaml", "aiplatform_config.yaml"])
def test_cloud_fixtures_convert_to_valid_jobsets(name):
    """They run their images' entry points: refused, naming the field, until a command is set."""
    parsed = parse_job(CLOUD / name)
    with pytest.raises(SpecError, match=r"pools\.\w+\.command: .*runs the image's entry point"):
        convert(copy.deepcopy(parsed), "jobset", source=name, image="gcr.io/p/t:v1", allow_loss=True)
    parsed.native = apply_overrides(parsed.native, ["module=trainer.task"])
    for pool in parsed.native["pools"].values():
        pool.pop("command", None)
    doc, _ = convert(parsed, "jobset", source=name, image="gcr.io/p/t:v1", allow_loss=True)
    check_schema(doc, "jobset", source=name)


# -- the in-pod entry point -------------------------------------------------------------------------

def _pod_environ(doc: dict, role: str, index: int) -> dict[str, str]:
    rjob = next(j for j in doc["spec"]["replicatedJobs"] if j["name"] == role)
    env = {e["name"]: e["value"] for e in rjob["template"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    return {**env, "JOB_COMPLETION_INDEX": str(index)}


def test_entry_point_builds_tf_config_from_completion_index():
    doc, _ = to_jobset(FIXTURES / "all_roles.yaml")
    env = pod_env(_pod_environ(doc, "worker", 1))
    config = json.loads(env["TF_CONFIG"])
    assert config == {"cluster": {"chief": ["mnist-chief-0-0.mnist:2222"],
                                  "worker": ["mnist-worker-0-0.mnist:2222", "mnist-worker-0-1.mnist:2222"],
                                  "ps": ["mnist-ps-0-0.mnist:2222"]},
                      "task": {"type": "worker", "index": 1}, "environment": "cloud"}
    assert json.loads(env["CLUSTER_SPEC"])["task"] == {"type": "workerpool1", "index": 1}
    assert json.loads(env["CLUSTER_SPEC"])["cluster"]["workerpool3"] == ["mnist-evaluator-0-0.mnist:2222"]
    assert env["MULTIWORKER_REPLICA"] == "worker-1"
    assert env["TF_CPU_ALLOCATOR_USE_BFC"] == "1"  # as locally; a pod's own setting wins
    assert pod_env({**_pod_environ(doc, "worker", 1), "TF_CPU_ALLOCATOR_USE_BFC": "0"})["TF_CPU_ALLOCATOR_USE_BFC"] == "0"
    evaluator = json.loads(pod_env(_pod_environ(doc, "evaluator", 0))["TF_CONFIG"])
    assert evaluator["task"] == {"type": "evaluator", "index": 0} and "evaluator" not in evaluator["cluster"]


def test_entry_point_without_chief_makes_worker0_workerpool0():
    doc, _ = to_jobset(FIXTURES / "workers_only.yaml")
    env = pod_env(_pod_environ(doc, "worker", 0))
    assert json.loads(env["CLUSTER_SPEC"])["task"] == {"type": "workerpool0", "index": 0}
    with pytest.raises(EntryError, match="worker-3 is not in MW_CLUSTER"):
        pod_env(_pod_environ(doc, "worker", 3))


def test_entry_point_execs_the_command_with_the_env(tmp_path):
    """Run as a pod would: the JobSet's command with JOB_COMPLETION_INDEX set by Kubernetes."""
    doc, _ = to_jobset(FIXTURES / "all_roles.yaml")
    env = {**os.environ, **_pod_environ(doc, "ps", 0)}
    probe = "import os, sys; sys.stdout.write(os.environ['TF_CONFIG']); sys.exit(7)"
    proc = subprocess.run([sys.executable, "-m", "multiworker.k8s_entry", "--", sys.executable, "-c", probe],
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 7, proc.stderr  # exec'd: the program's own exit code
    assert json.loads(proc.stdout)["task"] == {"type": "ps", "index": 0}
    bare = {k: v for k, v in env.items() if k != "MW_CLUSTER"}
    proc = subprocess.run([sys.executable, "-m", "multiworker.k8s_entry", "--", "true"], env=bare,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and proc.stderr.startswith("error: multiworker.k8s_entry: MW_CLUSTER is not set")


def test_cli_convert_to_jobset(tmp_path):
    out = tmp_path / "js.yaml"
    proc = subprocess.run([sys.executable, "-m", "multiworker", "convert", str(FIXTURES / "all_roles.yaml"),
                           "--to", "jobset", "--image", "gcr.io/p/t:v1", "-o", str(out)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(out.read_text()) == yaml.safe_load((FIXTURES / "all_roles.jobset.yaml").read_text())
    proc = subprocess.run([sys.executable, "-m", "multiworker", "convert", str(FIXTURES / "all_roles.yaml"),
                           "--to", "jobset"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "pass --image" in proc.stderr
