"""Cloud job formats -> native spec dicts: detection, golden dicts per parser, one-line errors."""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path

import pytest
import yaml

from multiworker.errors import SpecError
from multiworker.spec.formats import detect, parse_job
from multiworker.spec.load import spec_from_dict

CLOUD = Path(__file__).resolve().parents[1] / "fixtures" / "cloud"


def load(name: str) -> dict:
    return yaml.safe_load((CLOUD / name).read_text())


def parse_text(tmp_path: Path, text: str, name: str = "job.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return parse_job(path)


# -- detection ---------------------------------------------------------------------

@pytest.mark.parametrize(
    "data,expected",
    [
        ({"name": "x", "pools": {"worker": {}}}, "native"),
        ({"workerPoolSpecs": [{}]}, "vertex"),
        ({"displayName": "x", "jobSpec": {"workerPoolSpecs": []}}, "vertex"),
        ([{"replica_count": 1, "container_spec": {"image_uri": "i"}}], "vertex"),
        ({"worker_pool_specs": []}, "vertex"),
        ({"trainingInput": {"scaleTier": "CUSTOM"}}, "aiplatform"),
        ({"scaleTier": "CUSTOM", "masterType": "n1-standard-4"}, "aiplatform"),
        ({"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "spec": {}}, "tfjob"),
        ({"spec": {"tfReplicaSpecs": {}}}, "tfjob"),
        (["just", "strings"], "native"),
        (None, "native"),
    ],
    ids=["native", "vertex-config", "vertex-customjob", "vertex-sdk-list", "vertex-sdk-dict", "aiplatform",
         "aiplatform-top-level", "tfjob", "tfjob-without-kind", "list-of-strings", "empty"],
)
def test_detect(data, expected):
    assert detect(data) == expected


@pytest.mark.parametrize("name,expected", [("aiplatform_config.yaml", "aiplatform"), ("vertex_config.yaml", "vertex"),
                                           ("tfjob.yaml", "tfjob")])
def test_detect_fixtures(name, expected):
    assert detect(load(name)) == expected


@pytest.mark.parametrize(
    "data,message",
    [
        ({"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob"}, "kind 'PyTorchJob' is not supported"),
        ({"workerPoolSpec": []}, "did you mean `workerPoolSpecs` (Vertex AI)?"),
        ({"trainingInputs": {}}, "did you mean `trainingInput` (AI Platform)?"),
    ],
    ids=["other-kind", "vertex-typo", "aiplatform-typo"],
)
def test_detect_errors(data, message):
    with pytest.raises(SpecError) as info:
        detect(data, source="f.yaml")
    assert message in str(info.value) and str(info.value).startswith("f.yaml: ")


def test_format_forced_and_unknown(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(load("vertex_config.yaml")))
    with pytest.raises(SpecError, match="unknown key `baseOutputDirectory`"):  # read as native
        spec_from_dict(parse_job(path, format="native").native, source=str(path))
    with pytest.raises(SpecError, match="'gcp' is not supported; use one of native, vertex, aiplatform, tfjob"):
        parse_job(path, format="gcp")


# -- golden dicts for the tutorial fixtures ------------------------------------------------

GOLDEN = {
    "aiplatform_config.yaml": {
        "name": "aiplatform_config",
        "image": "gcr.io/my-project/mnist-trainer:latest",
        "args": ["--epochs", "1", "--steps-per-epoch", "3", "--job-dir=gs://my-bucket/mnist-aiplatform"],
        "output_dir": "gs://my-bucket/mnist-aiplatform",
        "pools": {
            "chief": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
            "worker": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
        },
        "run_policy": {"restart_policy": "ExitCode"},
    },
    "vertex_config.yaml": {
        "name": "vertex_config",
        "image": "us-docker.pkg.dev/my-project/trainers/mnist:latest",
        "args": ["--epochs=1", "--steps-per-epoch=3"],
        "output_dir": "gs://my-bucket/mnist-vertex",
        "pools": {
            "chief": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
            "worker": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
        },
        "run_policy": {"restart_policy": "ExitCode"},
    },
    "tfjob.yaml": {
        "name": "multi-worker",
        "image": "gcr.io/my-project/multi-worker-strategy:v1.0",
        "args": ["--saved_model_path=gs://my-bucket/saved_model_dir", "--checkpoint_path=gs://my-bucket/checkpoints",
                 "--epochs=1", "--steps-per-epoch=3"],
        "pools": {"worker": {"replicas": 3}},
        "run_policy": {"restart_policy": "Never"},
    },
}
NOTES = {
    "aiplatform_config.yaml": ["machine types, accelerators and disks do not apply locally (kept for conversions): "
                               "trainingInput.masterType, trainingInput.workerType",
                               "scheduling and placement settings do not apply locally: trainingInput.region"],
    "vertex_config.yaml": ["machine types, accelerators and disks do not apply locally (kept for conversions): "
                           "workerPoolSpecs[0].machineSpec, workerPoolSpecs[1].machineSpec"],
    "tfjob.yaml": ["cleanup and lifecycle settings do not apply locally: spec.runPolicy.cleanPodPolicy"],
}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_fixture_golden(name):
    parsed = parse_job(CLOUD / name)
    assert parsed.native == GOLDEN[name]
    assert parsed.all_notes() == NOTES[name]
    spec_from_dict(parsed.native, source=name)  # a valid native spec, images and gs:// paths untouched


def test_aiplatform_master_and_per_replica_containers(tmp_path):
    parsed = parse_text(tmp_path, """
        jobId: census_1
        trainingInput:
          scaleTier: CUSTOM
          masterType: n1-highcpu-16
          masterConfig:
            imageUri: gcr.io/p/census:v2
            containerCommand: [python3, -m, trainer.task]
            containerArgs: [--epochs, "3"]
            acceleratorConfig: {count: 1, type: NVIDIA_TESLA_T4}
          workerType: n1-standard-8
          workerCount: "2"
          workerConfig:
            containerArgs: [--epochs, "3"]
            diskConfig: {bootDiskType: pd-ssd, bootDiskSizeGb: 200}
          parameterServerType: n1-standard-4
          parameterServerCount: 1
          evaluatorType: n1-standard-4
          evaluatorCount: 1
          scheduling: {maxRunningTime: 7200s}
    """)
    assert parsed.native == {
        "name": "census_1",
        "image": "gcr.io/p/census:v2",
        "chief_task_type": "master",
        "pools": {
            "chief": {"replicas": 1, "module": "trainer.task", "args": ["--epochs", "3"],
                      "machine": {"machine_type": "n1-highcpu-16", "accelerator_type": "NVIDIA_TESLA_T4",
                                  "accelerator_count": 1}},
            "worker": {"replicas": 2, "args": ["--epochs", "3"],
                       "machine": {"machine_type": "n1-standard-8", "boot_disk_type": "pd-ssd",
                                                  "boot_disk_size_gb": 200}},
            "ps": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
            "evaluator": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
        },
        "run_policy": {"restart_policy": "ExitCode", "active_deadline": 7200.0},
    }


def test_aiplatform_package_job(tmp_path):
    parsed = parse_text(tmp_path, """
        trainingInput:
          scaleTier: BASIC
          packageUris: [gs://b/trainer-0.1.tar.gz]
          pythonModule: trainer.task
          runtimeVersion: "2.11"
          pythonVersion: "3.7"
          args: [--epochs=1]
    """, name="pkg.yaml")
    assert parsed.native == {"name": "pkg", "module": "trainer.task", "args": ["--epochs=1"],
                             "pools": {"chief": {"replicas": 1, "machine": {"scale_tier": "BASIC"}}},
                             "run_policy": {"restart_policy": "ExitCode"}}
    assert parsed.packages == {"chief": [("gs://b/trainer-0.1.tar.gz", "trainingInput.packageUris[0]")]}


def test_vertex_full_customjob_with_ps_evaluator_and_env(tmp_path):
    parsed = parse_text(tmp_path, """
        displayName: My PS job
        labels: {team: ml}
        jobSpec:
          workerPoolSpecs:
            - machineSpec: {machineType: n1-standard-8, acceleratorType: NVIDIA_TESLA_T4, acceleratorCount: 2}
              replicaCount: "1"
              diskSpec: {bootDiskType: pd-ssd, bootDiskSizeGb: 100}
              containerSpec:
                imageUri: gcr.io/p/t:1
                command: [python, -m, trainer.task]
                args: [--strategy, ps]
                env: [{name: MODE, value: chief}]
            - machineSpec: {machineType: n1-standard-4}
              replicaCount: 2
              containerSpec: {imageUri: gcr.io/p/t:1, command: [python, -m, trainer.task], args: [--strategy, ps]}
            - machineSpec: {machineType: n1-standard-4}
              replicaCount: 1
              containerSpec: {imageUri: gcr.io/p/t:1, command: [python, -m, trainer.task], args: [--strategy, ps]}
            - {}
          scheduling: {timeout: 1800s, disableRetries: true}
          serviceAccount: sa@p.iam.gserviceaccount.com
          enableWebAccess: true
    """)
    assert parsed.native == {
        "name": "My-PS-job",
        "image": "gcr.io/p/t:1",
        "module": "trainer.task",
        "args": ["--strategy", "ps"],
        "pools": {
            "chief": {"replicas": 1, "env": {"MODE": "chief"},
                      "machine": {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                                  "accelerator_count": 2, "boot_disk_type": "pd-ssd", "boot_disk_size_gb": 100}},
            "worker": {"replicas": 2, "machine": {"machine_type": "n1-standard-4"}},
            "ps": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
        },
        "run_policy": {"restart_policy": "Never", "active_deadline": 1800.0},
    }
    assert parsed.dropped == [("tracking", "labels"), ("network", "jobSpec.serviceAccount"),
                              ("tracking", "jobSpec.enableWebAccess")]


def test_vertex_sdk_list_as_json(tmp_path):
    pools = [
        {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 1,
         "python_package_spec": {"executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12:latest",
                                 "package_uris": ["gs://b/trainer-0.1.tar.gz"], "python_module": "trainer.task",
                                 "args": ["--epochs", 1]}},
        {"machine_spec": {"machine_type": "n1-standard-4"}, "replica_count": 2,
         "python_package_spec": {"executor_image_uri": "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12:latest",
                                 "package_uris": ["gs://b/trainer-0.1.tar.gz"], "python_module": "trainer.task",
                                 "args": ["--epochs", 1]}},
    ]
    path = tmp_path / "pools.json"
    path.write_text(json.dumps(pools))
    parsed = parse_job(path)
    assert parsed.native == {
        "name": "pools",
        "image": "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12:latest",
        "module": "trainer.task",
        "args": ["--epochs", "1"],
        "pools": {"chief": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
                  "worker": {"replicas": 2, "machine": {"machine_type": "n1-standard-4"}}},
        "run_policy": {"restart_policy": "ExitCode"},
    }
    assert parsed.packages["worker"] == [("gs://b/trainer-0.1.tar.gz", "[1].python_package_spec.package_uris[0]")]


def test_tfjob_chief_ps_master_resources_and_policies(tmp_path):
    doc = load("tfjob.yaml")
    worker = doc["spec"]["tfReplicaSpecs"]["Worker"]
    worker["restartPolicy"] = "OnFailure"
    container = worker["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"cpu": 4, "memory": "8Gi", "nvidia.com/gpu": 1}}
    container["env"] = [{"name": "A", "value": "1"}, {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"key": "t"}}}]
    worker["template"]["spec"]["nodeSelector"] = {"cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}
    master = copy.deepcopy(worker)
    master["replicas"] = 1
    master["restartPolicy"] = "ExitCode"
    doc["spec"]["tfReplicaSpecs"]["Master"] = master
    ps = copy.deepcopy(worker)
    ps["restartPolicy"] = "Always"
    ps["replicas"] = 2
    doc["spec"]["tfReplicaSpecs"]["PS"] = ps
    doc["spec"]["runPolicy"].update(backoffLimit=5, activeDeadlineSeconds=600)
    doc["spec"]["successPolicy"] = "AllWorkers"
    path = tmp_path / "tf.yaml"
    path.write_text(yaml.safe_dump(doc))
    parsed = parse_job(path)
    machine = {"accelerator_type": "NVIDIA_TESLA_T4", "cpu": "4", "memory": "8Gi", "accelerator_count": 1}
    assert parsed.native["chief_task_type"] == "master"
    assert parsed.native["pools"] == {"worker": {"replicas": 3, "machine": machine},
                                      "chief": {"replicas": 1, "machine": machine},
                                      "ps": {"replicas": 2, "machine": machine}}
    assert parsed.native["env"] == {"A": "1"}
    assert parsed.native["run_policy"] == {"restart_policy": "ExitCode", "backoff_limit": 5, "active_deadline": 600,
                                           "success_policy": "all_workers"}
    assert any("strictest: ExitCode" in n for n in parsed.all_notes())
    assert [f for f, _ in parsed.conflicts] == ["spec.tfReplicaSpecs.PS.restartPolicy"]
    assert ("container", "spec.tfReplicaSpecs.Worker.template.spec.containers[0].env[1].valueFrom (TOKEN)") \
        in parsed.dropped


# -- malformed inputs: one line, naming file and field ---------------------------------------

def _tfjob(mutate) -> dict:
    doc = load("tfjob.yaml")
    mutate(doc)
    return doc


def _worker(doc) -> dict:
    return doc["spec"]["tfReplicaSpecs"]["Worker"]


def _set(path: list, value):
    def mutate(doc):
        node = doc
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value
    return mutate


VERTEX = load("vertex_config.yaml")
AIP = load("aiplatform_config.yaml")

BAD = [
    # Vertex AI
    ("vertex-no-pools", {"workerPoolSpecs": []}, "workerPoolSpecs[0]", "pool 0 (the chief) is missing"),
    ("vertex-empty-pool-0", {"workerPoolSpecs": [{}, VERTEX["workerPoolSpecs"][1]]}, "workerPoolSpecs[0]",
     "pool 0 (the chief) is missing"),
    ("vertex-two-chiefs", {"workerPoolSpecs": [{**VERTEX["workerPoolSpecs"][0], "replicaCount": 2}]},
     "workerPoolSpecs[0].replicaCount", "exactly one replica"),
    ("vertex-unknown-key", {**VERTEX, "baseOutputDir": {}}, "baseOutputDir", "did you mean `baseOutputDirectory`?"),
    ("vertex-unknown-nested", {"workerPoolSpecs": [{"replicaCount": 1, "containerSpec": {"imageUri": "i", "arg": []}}]},
     "workerPoolSpecs[0].containerSpec.arg", "did you mean `args`?"),
    ("vertex-sdk-unknown", [{"replica_count": 1, "container_spec": {"image_uri": "i", "comand": ["x"]}}],
     "[0].container_spec.comand", "did you mean `command`?"),
    ("vertex-no-image", {"workerPoolSpecs": [{"containerSpec": {"args": []}}]},
     "workerPoolSpecs[0].containerSpec.imageUri", "is required"),
    ("vertex-both-specs", {"workerPoolSpecs": [{"containerSpec": {"imageUri": "i"}, "pythonPackageSpec": {
        "executorImageUri": "e", "packageUris": ["p"], "pythonModule": "m"}}]}, "workerPoolSpecs[0]", "keep one"),
    ("vertex-five-pools", {"workerPoolSpecs": [VERTEX["workerPoolSpecs"][0]] + [{}] * 4}, "workerPoolSpecs[4]",
     "at most 4"),
    ("vertex-bad-timeout", {**VERTEX, "scheduling": {"timeout": "soon"}}, "scheduling.timeout", "not a duration"),
    # AI Platform
    ("aip-unknown-key", {"trainingInput": {**AIP["trainingInput"], "workerCnt": 2}}, "trainingInput.workerCnt",
     "did you mean `workerCount`?"),
    ("aip-no-master-type", {"trainingInput": {"scaleTier": "CUSTOM", "masterConfig": {"imageUri": "i"}}},
     "trainingInput.masterType", "is required with scaleTier: CUSTOM"),
    ("aip-worker-type-missing", {"trainingInput": {**AIP["trainingInput"], "workerType": None}},
     "trainingInput.workerType", "is required when workerCount is 1"),
    ("aip-no-program", {"trainingInput": {"scaleTier": "BASIC"}}, "trainingInput.pythonModule", "no program"),
    ("aip-args-and-container-args", {"trainingInput": {**AIP["trainingInput"], "masterConfig": {
        "imageUri": "i", "containerArgs": ["--x"]}}}, "trainingInput.args", "cannot both be set"),
    ("aip-tier-without-counts", {"trainingInput": {"scaleTier": "STANDARD_1", "pythonModule": "m",
                                                   "packageUris": ["p"]}}, "trainingInput.scaleTier", "CUSTOM"),
    ("aip-count-not-number", {"trainingInput": {**AIP["trainingInput"], "workerCount": "two"}},
     "trainingInput.workerCount", "valid integer"),
    # TFJob
    ("tfjob-no-tensorflow-container", _tfjob(lambda d: _worker(d)["template"]["spec"]["containers"][0].update(
        name="trainer")), "spec.tfReplicaSpecs.Worker.template.spec.containers", "no container named `tensorflow`"),
    ("tfjob-two-chiefs", _tfjob(lambda d: d["spec"]["tfReplicaSpecs"].update(Chief={**_worker(d), "replicas": 2})),
     "spec.tfReplicaSpecs.Chief.replicas", "at most one chief"),
    ("tfjob-chief-and-master", _tfjob(lambda d: d["spec"]["tfReplicaSpecs"].update(
        Chief={**_worker(d), "replicas": 1}, Master={**_worker(d), "replicas": 1})), "spec.tfReplicaSpecs",
     "both Chief and Master"),
    ("tfjob-unknown-replica-type", _tfjob(lambda d: d["spec"]["tfReplicaSpecs"].update(
        Workers=d["spec"]["tfReplicaSpecs"].pop("Worker"))), "spec.tfReplicaSpecs.Workers", "did you mean `Worker`?"),
    ("tfjob-unknown-pod-key", _tfjob(lambda d: _worker(d)["template"]["spec"].update(volume=[])),
     "spec.tfReplicaSpecs.Worker.template.spec.volume", "did you mean `volumes`?"),
    ("tfjob-unknown-container-key", _tfjob(lambda d: _worker(d)["template"]["spec"]["containers"][0].update(arg=[])),
     "containers[0].arg", "did you mean `args`?"),
    ("tfjob-unknown-run-policy-key", _tfjob(_set(["spec", "runPolicy", "cleanPodPolicies"], "None")),
     "spec.runPolicy.cleanPodPolicies", "did you mean `cleanPodPolicy`?"),
    ("tfjob-legacy-and-current-clean-pod-policy", _tfjob(_set(["spec", "cleanPodPolicy"], "None")),
     "spec.cleanPodPolicy", "is also set in spec.runPolicy.cleanPodPolicy; keep only"),
    ("tfjob-legacy-bad-clean-pod-policy", _tfjob(lambda d: d["spec"].update(runPolicy=None, cleanPodPolicy="Nothing")),
     "spec.runPolicy.cleanPodPolicy", "'Running'"),
    ("tfjob-bad-restart-policy", _tfjob(lambda d: _worker(d).update(restartPolicy="Sometimes")),
     "spec.tfReplicaSpecs.Worker.restartPolicy", "'OnFailure'"),
    ("tfjob-bad-clean-pod-policy", _tfjob(_set(["spec", "runPolicy", "cleanPodPolicy"], "Nothing")),
     "spec.runPolicy.cleanPodPolicy", "'Running'"),
    ("tfjob-wrong-api-version", _tfjob(_set(["apiVersion"], "kubeflow.org/v1beta2")), "apiVersion", "kubeflow.org/v1"),
    ("tfjob-no-image", _tfjob(lambda d: _worker(d)["template"]["spec"]["containers"][0].pop("image")),
     "containers[0].image", "is required"),
    ("tfjob-no-spec", {"apiVersion": "kubeflow.org/v1", "kind": "TFJob"}, "spec", "is required"),
]


@pytest.mark.parametrize("data,field,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_malformed_input_is_one_line_error(tmp_path, data, field, message):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpecError) as info:
        parse_job(path)
    text = str(info.value)
    assert text.startswith(f"{path}: "), text
    assert field in (info.value.field or ""), text
    assert message in text, text
    assert "\n" not in text


@pytest.mark.parametrize(
    "fields,task_type",
    [
        ({"masterConfig": {"imageUri": "i"}}, "master"),
        ({"masterConfig": {"imageUri": "i"}, "useChiefInTfConfig": False}, "master"),
        ({"masterConfig": {"imageUri": "i"}, "useChiefInTfConfig": True}, "chief"),
        ({"pythonModule": "t.task", "packageUris": ["p.tar.gz"], "runtimeVersion": "1.15"}, "master"),
        ({"pythonModule": "t.task", "packageUris": ["p.tar.gz"], "runtimeVersion": "2.11"}, "chief"),
    ],
    ids=["container-default", "container-false", "container-true", "runtime-1.15", "runtime-2.11"],
)
def test_aiplatform_chief_or_master(tmp_path, fields, task_type):
    """Custom containers follow useChiefInTfConfig; runtime versions 2.1 and later use `chief`."""
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({"trainingInput": {"scaleTier": "CUSTOM", "masterType": "n1-standard-4",
                                                      "workerType": "n1-standard-4", "workerCount": 1, **fields}}))
    native = parse_job(path).native
    assert native.get("chief_task_type", "chief") == task_type
