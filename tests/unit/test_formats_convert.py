"""Conversions between formats: golden outputs, schema checks, round trips, and no silent loss."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from multiworker.errors import SpecError
from multiworker.spec.formats import parse_job
from multiworker.spec.formats.convert import convert
from multiworker.spec.formats.schema import check_schema
from multiworker.spec.load import apply_overrides, spec_from_dict

CLOUD = Path(__file__).resolve().parents[1] / "fixtures" / "cloud"
TARGETS = ("vertex", "aiplatform", "tfjob")

BASE = """
name: mnist
image: gcr.io/p/mnist:1
module: trainer.task
working_dir: .
args: [--epochs, "2", --job-dir=gs://b/out]
output_dir: gs://b/out
pools:
  chief: {machine: {machine_type: n1-standard-8, accelerator_type: NVIDIA_TESLA_T4, accelerator_count: 1}}
  worker:
    replicas: 2
    args: [--epochs, "2", --worker, --job-dir=gs://b/out]
    machine: {machine_type: n1-standard-4}
  ps: {replicas: 1, machine: {machine_type: n1-highmem-2}}
  evaluator: {replicas: 1, command: [python, eval.py], image: gcr.io/p/eval:1, machine: {machine_type: n1-standard-4}}
run_policy: {restart_policy: ExitCode, active_deadline: 2h}
"""
# What each target adds to BASE (all of it expressible there).
EXTRAS = {
    "vertex": ["env={A: '1'}", "pools.chief.machine.boot_disk_size_gb=200", "run_policy.restart_policy=Never"],
    "aiplatform": ["chief_task_type=master", "pools.chief.machine.boot_disk_type=pd-ssd"],
    "tfjob": ["env={A: '1'}", "chief_task_type=master", "run_policy.restart_policy=OnFailure",
              "run_policy.backoff_limit=5", "run_policy.success_policy=all_workers", "run_policy.grace_period=30",
              "output_dir=/mnt/out", "args=[--epochs, '2']", "pools.worker.args=[--worker]",
              "pools.worker.machine={cpu: '4', memory: 8Gi, machine_type: e2-standard-4}"],
}


def parsed_native(text: str, overrides=(), name: str = "job.yaml", tmp_path: Path | None = None):
    data = apply_overrides(yaml.safe_load(textwrap.dedent(text)), list(overrides))
    path = (tmp_path or Path("/nonexistent")) / name
    return parse_job(path, format="native", data=data), str(path)


def meaning(spec) -> dict:
    """What a job means wherever it runs: topology, programs, output, and how failures end it."""
    rp = spec.run_policy
    return {
        "name": spec.name,
        "counts": spec.replica_counts(),
        "chief_task_type": spec.chief_task_type,
        "output_dir": spec.output_dir,
        "programs": {role: spec.resolved(role).model_dump(exclude={"working_dir", "python"})
                     for role in spec.replica_counts()},
        "run_policy": rp.model_dump(include={"restart_policy", "backoff_limit", "active_deadline", "success_policy",
                                             "grace_period"}),
    }


def write_read(parsed, to: str, source: str):
    doc, notes = convert(parsed, to, source=source)
    back = parse_job(source, format=to, data=copy.deepcopy(doc))
    return doc, notes, spec_from_dict(back.native, source=source)


@pytest.mark.parametrize("to", TARGETS)
def test_round_trip_native_to_target_keeps_meaning(to):
    parsed, source = parsed_native(BASE, EXTRAS[to])
    original = spec_from_dict(parsed.native, source=source)
    _, notes, again = write_read(parsed, to, source)
    assert meaning(again) == meaning(original)
    assert "local settings left out (working_dir): they only say how to run here" in notes


@pytest.mark.parametrize("to", TARGETS)
@pytest.mark.parametrize("name", ["vertex_config.yaml", "aiplatform_config.yaml", "tfjob.yaml"])
def test_fixtures_convert_and_read_back(name, to):
    parsed = parse_job(CLOUD / name)
    original = spec_from_dict(parsed.native, source=name)
    overrides = []  # make the fixture expressible in the target (each change is an error otherwise)
    if "chief" not in original.pools and to != "tfjob":
        overrides += ["pools.chief.machine={machine_type: n1-standard-4}", "pools.worker.replicas=2",
                      "pools.worker.machine={machine_type: n1-standard-4}"]
    if to == "aiplatform" and original.output_dir and not name.startswith("aiplatform"):
        overrides.append("output_dir=null")
    if to == "aiplatform" and original.run_policy.restart_policy == "Never":
        overrides.append("run_policy.restart_policy=ExitCode")
    if overrides:
        parsed.native = apply_overrides(parsed.native, overrides)
        original = spec_from_dict(parsed.native, source=name)
    _, _, again = write_read(parsed, to, str(CLOUD / name))
    assert meaning(again) == meaning(original) | {"name": meaning(again)["name"]}


def test_same_format_round_trip_is_identity_for_fixtures():
    for name, fmt in (("vertex_config.yaml", "vertex"), ("tfjob.yaml", "tfjob"), ("aiplatform_config.yaml", "aiplatform")):
        parsed = parse_job(CLOUD / name)
        doc, _ = convert(parsed, fmt, source=name)
        again = parse_job(CLOUD / name, format=fmt, data=doc)
        dump = lambda p, name=name: spec_from_dict(p.native, source=name).model_dump(exclude={"name"})  # noqa: E731
        assert dump(again) == dump(parsed), name


def test_golden_vertex_to_tfjob():
    doc, notes = convert(parse_job(CLOUD / "vertex_config.yaml"), "tfjob", source="vertex_config.yaml")
    container = {
        "name": "tensorflow",
        "image": "us-docker.pkg.dev/my-project/trainers/mnist:latest",
        "args": ["--epochs=1", "--steps-per-epoch=3"],
        "env": [{"name": "AIP_MODEL_DIR", "value": "gs://my-bucket/mnist-vertex/model"},
                {"name": "AIP_CHECKPOINT_DIR", "value": "gs://my-bucket/mnist-vertex/checkpoints"},
                {"name": "AIP_TENSORBOARD_LOG_DIR", "value": "gs://my-bucket/mnist-vertex/logs"}],
    }
    template = {"spec": {"containers": [container],
                         "nodeSelector": {"node.kubernetes.io/instance-type": "n1-standard-4"}}}
    assert doc == {
        "apiVersion": "kubeflow.org/v1",
        "kind": "TFJob",
        "metadata": {"name": "vertex-config"},
        "spec": {
            "runPolicy": {"backoffLimit": 3},
            "tfReplicaSpecs": {
                "Chief": {"replicas": 1, "restartPolicy": "ExitCode", "template": template},
                "Worker": {"replicas": 1, "restartPolicy": "ExitCode", "template": template},
            },
        },
    }
    assert notes == ["name 'vertex_config' is 'vertex-config' on Kubeflow TFJob"]


def test_golden_native_to_vertex_and_aiplatform():
    parsed, source = parsed_native(BASE, ["pools={chief: {machine: {machine_type: n1-standard-8}}, "
                                          "worker: {replicas: 2, machine: {machine_type: n1-standard-4}}}"])
    doc, _ = convert(parsed, "vertex", source=source)
    container = {"imageUri": "gcr.io/p/mnist:1", "command": ["python", "-m", "trainer.task"],
                 "args": ["--epochs", "2", "--job-dir=gs://b/out"]}
    assert doc == {"displayName": "mnist", "jobSpec": {
        "workerPoolSpecs": [
            {"machineSpec": {"machineType": "n1-standard-8"}, "replicaCount": 1, "containerSpec": container},
            {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 2, "containerSpec": container},
        ],
        "baseOutputDirectory": {"outputUriPrefix": "gs://b/out"},
        "scheduling": {"timeout": "7200s", "restartJobOnWorkerRestart": True},
    }}
    doc, _ = convert(parsed, "aiplatform", source=source)
    command = ["python", "-m", "trainer.task"]
    assert doc == {"jobId": "mnist", "trainingInput": {
        "scaleTier": "CUSTOM",
        "masterType": "n1-standard-8",
        "masterConfig": {"imageUri": "gcr.io/p/mnist:1", "containerCommand": command,
                         "containerArgs": ["--epochs", "2"]},
        "workerType": "n1-standard-4",
        "workerCount": 2,
        "workerConfig": {"containerCommand": command, "containerArgs": ["--epochs", "2"]},
        "jobDir": "gs://b/out",
        "useChiefInTfConfig": True,
        "scheduling": {"maxRunningTime": "7200s"},
    }}


# -- what a target cannot express: errors naming the field -------------------------------------

LOSS = [
    ("vertex", ["chief_task_type=master"], "chief_task_type", "first pool `chief`"),
    ("vertex", ["run_policy.backoff_limit=5"], "run_policy.backoff_limit", "a limit of local restarts; Vertex AI has none"),
    ("vertex", ["run_policy.success_policy=all_workers"], "run_policy.success_policy", "chief's exit"),
    ("vertex", ["output_dir=./out"], "output_dir", "gs://BUCKET/PATH"),
    ("vertex", ["pools.ps.machine.cpu=4"], "pools.ps.machine.cpu", "has no cpu setting"),
    ("aiplatform", ["env={A: '1'}"], "env", "cannot set environment variables"),
    ("aiplatform", ["pools.worker.args=[--epochs, '2']"], "output_dir", "--job-dir=gs://b/out"),
    ("aiplatform", ["run_policy.grace_period=5"], "run_policy.grace_period", "no termination grace period"),
    ("tfjob", ["output_dir=out"], "output_dir", "absolute path in the pod"),
    ("tfjob", ["pools.chief.machine.boot_disk_size_gb=100"], "pools.chief.machine.boot_disk_size_gb", "no boot_disk"),
]


@pytest.mark.parametrize("to,policy", [("vertex", "OnFailure"), ("vertex", "Always"), ("aiplatform", "Never")])
def test_restart_policy_the_platform_lacks_is_a_note(to, policy):
    """The platform's own retry rule applies there; a job that succeeds is the same, so it is not a loss."""
    parsed, source = parsed_native(BASE, [f"run_policy.restart_policy={policy}"])
    _, notes = convert(parsed, to, source=source)
    assert any(n.startswith(f"run_policy.restart_policy is {policy}; ") and "only after system failures" in n
               for n in notes), notes


@pytest.mark.parametrize("to,overrides,field,message", LOSS, ids=[f"{c[0]}-{c[2]}" for c in LOSS])
def test_unexpressible_is_an_error_naming_the_field(to, overrides, field, message):
    parsed, source = parsed_native(BASE, overrides)
    with pytest.raises(SpecError) as info:
        convert(parsed, to, source=source)
    assert info.value.field == field, str(info.value)
    assert message in str(info.value) and "--allow-loss" in str(info.value)
    assert "\n" not in str(info.value)
    _, notes = convert(parsed, to, source=source, image="gcr.io/p/x:1", allow_loss=True)
    assert any(note.startswith(f"--allow-loss: {field}: ") for note in notes), notes


def test_module_without_image_needs_one():
    parsed, source = parsed_native(BASE, ["image=null", "pools.evaluator.image=null"])
    with pytest.raises(SpecError, match=r"image: pool chief runs module trainer.task but has no container image; "
                                        r"pass --image IMAGE or set `image` in the spec"):
        convert(parsed, "vertex", source=source)
    doc, _ = convert(parsed, "vertex", source=source, image="gcr.io/p/given:2")
    assert {p["containerSpec"]["imageUri"] for p in doc["jobSpec"]["workerPoolSpecs"]} == {"gcr.io/p/given:2"}


def test_workers_only_job_gets_worker_0_as_chief():
    """As the tutorials submit a MultiWorkerMirroredStrategy job: pool 0 (worker 0) + pool 1 (the rest)."""
    parsed = parse_job(CLOUD / "tfjob.yaml")
    doc, notes = convert(parsed, "vertex", source="tfjob.yaml")
    assert [p["replicaCount"] for p in doc["jobSpec"]["workerPoolSpecs"]] == [1, 2]
    assert any(n.startswith("pools.worker: worker 0 becomes Vertex AI's chief (its first pool) and 2 worker(s) "
                            "remain; TF_CONFIG then names it `chief`") for n in notes), notes
    doc, notes = convert(parsed, "aiplatform", source="tfjob.yaml", allow_loss=True)
    assert doc["trainingInput"]["workerCount"] == 2 and doc["trainingInput"]["useChiefInTfConfig"] is True
    assert any("worker 0 becomes AI Platform's master" in n for n in notes), notes


def test_cloud_settings_without_native_home(tmp_path):
    doc = yaml.safe_load((CLOUD / "tfjob.yaml").read_text())
    worker = doc["spec"]["tfReplicaSpecs"]["Worker"]
    worker["template"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    doc["spec"]["tfReplicaSpecs"]["Evaluator"] = {**copy.deepcopy(worker), "replicas": 1, "restartPolicy": "OnFailure"}
    parsed = parse_job(tmp_path / "tf.yaml", data=doc)
    with pytest.raises(SpecError, match=r"restartPolicy: restartPolicy differs by replica type \(Worker: Never, "
                                        r"Evaluator: OnFailure\); the native spec has one run_policy.restart_policy"):
        convert(parsed, "native", source="tf.yaml")
    parsed.conflicts.clear()
    with pytest.raises(SpecError, match=r"Worker.template.spec.volumes: volume and storage mounts have no equivalent"):
        convert(parsed, "native", source="tf.yaml")
    _, notes = convert(parsed, "native", source="tf.yaml", allow_loss=True)
    assert "not carried over (cleanup and lifecycle settings): spec.runPolicy.cleanPodPolicy" in notes


VERTEX_PACKAGE_JOB = """
displayName: taxifare
jobSpec:
  workerPoolSpecs:
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 1
    pythonPackageSpec: &program
      executorImageUri: us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest
      packageUris: [gs://b/trainer-0.1.tar.gz]
      pythonModule: trainer.task
      args: [--epochs=2]
  - machineSpec: {machineType: n1-standard-4}
    replicaCount: 2
    pythonPackageSpec: *program
"""


def test_a_python_package_job_converts_between_vertex_and_ai_platform(tmp_path):
    path = tmp_path / "pkg.yaml"
    path.write_text(VERTEX_PACKAGE_JOB)
    doc, notes = convert(parse_job(path), "aiplatform", source=str(path))
    ti = doc["trainingInput"]
    assert (ti["pythonModule"], ti["packageUris"], ti["args"]) == ("trainer.task", ["gs://b/trainer-0.1.tar.gz"], ["--epochs=2"])
    assert ti["runtimeVersion"] == "2.11" and ti["workerCount"] == 2
    assert "masterConfig" not in ti and "workerConfig" not in ti  # no image: AI Platform installs the package
    assert any("runtimeVersion 2.11" in n for n in notes)
    back = tmp_path / "ai.yaml"
    back.write_text(yaml.safe_dump(doc))
    vertex_doc, _ = convert(parse_job(back), "vertex", source=str(back),
                            image="us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest")
    pools = vertex_doc["jobSpec"]["workerPoolSpecs"]
    assert [p["pythonPackageSpec"]["packageUris"] for p in pools] == [["gs://b/trainer-0.1.tar.gz"]] * 2
    assert [p["replicaCount"] for p in pools] == [1, 2] and all("containerSpec" not in p for p in pools)
    same, _ = convert(parse_job(path), "vertex", source=str(path))
    assert same["jobSpec"]["workerPoolSpecs"][1]["pythonPackageSpec"]["executorImageUri"].endswith("py310:latest")


def test_a_python_package_job_cannot_go_where_packages_cannot_run(tmp_path):
    path = tmp_path / "pkg.yaml"
    path.write_text("trainingInput: {scaleTier: BASIC, pythonModule: trainer.task, packageUris: [gs://b/t.tar.gz]}\n")
    with pytest.raises(SpecError, match=r"trainingInput.packageUris\[0\]: tfjob cannot run Python packages"):
        convert(parse_job(path), "tfjob", source=str(path), image="gcr.io/p/x:1")


# -- schemas ------------------------------------------------------------------------------

def test_schema_rejects_bad_vertex_and_tfjob_documents():
    doc, _ = convert(parse_job(CLOUD / "vertex_config.yaml"), "vertex", source="v.yaml")
    bad = copy.deepcopy(doc)
    bad["jobSpec"]["workerPoolSpecs"][1]["machineSpec"]["acceleratorType"] = "T4"
    with pytest.raises(SpecError) as info:
        check_schema(bad, "vertex", source="v.yaml")
    assert info.value.field == "jobSpec.workerPoolSpecs[1].machineSpec.acceleratorType"
    assert "'T4' is not one of" in str(info.value) and "Vertex AI CustomJob schema" in str(info.value)
    bad = copy.deepcopy(doc)
    bad["jobSpec"]["workerPoolSpecs"][0]["replicaCount"] = "one"
    with pytest.raises(SpecError, match="replicaCount"):
        check_schema(bad, "vertex", source="v.yaml")

    doc, _ = convert(parse_job(CLOUD / "tfjob.yaml"), "tfjob", source="t.yaml")
    check_schema(doc, "tfjob", source="t.yaml")
    bad = copy.deepcopy(doc)
    bad["spec"]["tfReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = "Always"
    with pytest.raises(SpecError, match=r"Additional properties are not allowed .*Kubeflow TFJob CRD"):
        check_schema(bad, "tfjob", source="t.yaml")
    bad = copy.deepcopy(doc)
    bad["spec"]["runPolicy"]["backoffLimit"] = "three"
    with pytest.raises(SpecError) as info:
        check_schema(bad, "tfjob", source="t.yaml")
    assert info.value.field == "spec.runPolicy.backoffLimit"


def test_schema_copies_are_current():
    """The shipped copies regenerate identically from the staged originals (when those are here)."""
    staged = Path(__file__).resolve().parents[3] / "shared" / "data" / "schemas"  # ../shared beside the checkout
    if not staged.is_dir():
        pytest.skip(f"needs ../shared beside the checkout: {staged} not found")
    import importlib.util

    from multiworker.spec.formats.schema import load_schema

    script = Path(__file__).resolve().parents[2] / "src" / "multiworker" / "schemas" / "extract.py"
    spec = importlib.util.spec_from_file_location("schema_extract", script)
    extract = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(extract)
    assert load_schema("tfjob") == extract.tfjob_schema(staged / "kubeflow.org_tfjobs.yaml")
    assert load_schema("vertex") == extract.vertex_schema(staged / "vertexai_v1_customjob_schemas.json")
    assert load_schema("jobset") == extract.jobset_schema(staged / "jobset" / "jobset.x-k8s.io_jobsets.yaml")


# -- CLI ------------------------------------------------------------------------------------

def test_cli_convert(tmp_path, mw_home):
    out = tmp_path / "job.tfjob.yaml"
    proc = subprocess.run([sys.executable, "-m", "multiworker", "convert", str(CLOUD / "vertex_config.yaml"),
                           "--to", "tfjob", "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(out.read_text())["kind"] == "TFJob"
    assert "note: name 'vertex_config' is 'vertex-config' on Kubeflow TFJob" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "multiworker", "convert", str(out), "--to", "native"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load(proc.stdout)["pools"] == {"chief": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
                                                    "worker": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}}}


def test_cli_convert_error_is_one_line_exit_2(mw_home):
    proc = subprocess.run([sys.executable, "-m", "multiworker", "convert", str(CLOUD / "tfjob.yaml"), "--to", "vertex",
                           "--set", "run_policy.success_policy=all_workers"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0
    assert "run_policy.success_policy: on Vertex AI the chief's exit decides the job" in proc.stderr


@pytest.mark.parametrize("name, expected", [("1234", "job-1234"), ("My_Job", "my-job"), ("9.Lives", "job-9-lives")],
                         ids=["digits", "case", "digit-first"])
def test_tfjob_names_are_rfc_1035(tmp_path, name, expected):
    from multiworker.spec.formats import parse_job
    from multiworker.spec.formats.convert import convert

    path = tmp_path / "j.yaml"
    path.write_text(f"name: '{name}'\nmodule: m\nimage: gcr.io/p/t:v1\npools: {{worker: {{replicas: 2}}}}\n")
    doc, notes = convert(parse_job(path), "tfjob", source=str(path))
    assert doc["metadata"]["name"] == expected
    assert any(expected in n for n in notes)


def test_tfjob_replica_service_names_over_63_characters_are_one_line_error(tmp_path):
    from multiworker.errors import SpecError
    from multiworker.spec.formats import parse_job
    from multiworker.spec.formats.convert import convert

    path = tmp_path / "j.yaml"
    path.write_text(f"name: {'a' * 50}\nmodule: m\nimage: gcr.io/p/t:v1\npools: {{chief: {{replicas: 1}}, "
                    "worker: {replicas: 12}}\n")
    doc, _ = convert(parse_job(path), "tfjob", source=str(path))  # a-...-worker-11: 60 characters, fits
    assert doc["metadata"]["name"] == "a" * 50
    path.write_text(f"name: {'a' * 60}\nmodule: m\nimage: gcr.io/p/t:v1\npools: {{worker: {{replicas: 2}}}}\n")
    with pytest.raises(SpecError, match=r"name: .*'a{60}-worker-1' 69 characters; Kubernetes allows 63: "
                                        r"shorten the name to 54 "):
        convert(parse_job(path), "tfjob", source=str(path))
