"""TF_CONFIG and CLUSTER_SPEC as each platform sets them, by the format a job came from (docs/environment.md):
every form read by its real reader, with one replica and with two."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from multiworker.cluster import primary_replica, replica_env, replica_ids
from multiworker.spec.formats import LoadOptions, load_job
from multiworker.spec.formats.gcloud import load_command

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
IMAGE = "gcr.io/p/trainer:v1"

FILES = {
    "native": "name: j\nmodule: trainer.task\npools:\n  worker: {replicas: 1}\n",
    "vertex": f"workerPoolSpecs:\n  - machineSpec: {{machineType: n1-standard-4}}\n    replicaCount: 1\n"
              f"    containerSpec: {{imageUri: {IMAGE}}}\n",
    "aiplatform": f"trainingInput:\n  scaleTier: BASIC\n  masterConfig: {{imageUri: {IMAGE}}}\n  region: us-central1\n",
    "tfjob": ("apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: j}\nspec:\n  tfReplicaSpecs:\n"
              "    Worker:\n      replicas: 1\n      template:\n        spec:\n          containers:\n"
              f"            - {{name: tensorflow, image: {IMAGE}}}\n"),
}
LINES = {
    "vertex": f"gcloud ai custom-jobs create --region us-central1 --display-name j "
              f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,container-image-uri={IMAGE}",
    "aiplatform": f"gcloud ai-platform jobs submit training j --region us-central1 --master-image-uri {IMAGE} "
                  "--scale-tier BASIC",
}
# (form, replicas) -> what each replica gets; "both" for every job of several replicas.
SINGLE = {"native": set(), "tfjob": set(), "jobset": set(), "vertex": {"CLUSTER_SPEC"},
          "aiplatform": {"TF_CONFIG", "CLUSTER_SPEC"}}
FORMS = ["native", "vertex", "vertex-gcloud", "aiplatform", "aiplatform-gcloud", "tfjob", "jobset"]


def _load(form: str, tmp_path: Path, replicas: int):
    fmt = form.removesuffix("-gcloud")
    grow = {"native": "pools.worker.replicas", "tfjob": "pools.worker.replicas", "jobset": "pools.worker.replicas",
            "vertex": "pools.worker.replicas", "aiplatform": "pools.worker.replicas"}[fmt]
    overrides = [f"{grow}={replicas - 1 if fmt in ('vertex', 'aiplatform') else replicas}"] if replicas > 1 else []
    if form.endswith("-gcloud"):
        line = LINES[fmt] + "".join(f" --set {o}" for o in overrides)
        loaded, _ = load_command(shlex.split(line)[1:], cwd=tmp_path, check=False)
        return loaded
    if fmt == "jobset":
        path = FIXTURES / "jobset" / "workers_only.jobset.yaml"
        overrides = [f"pools.worker.replicas={replicas}"]
    else:
        path = tmp_path / f"{fmt}.yaml"
        path.write_text(FILES[fmt])
    return load_job(path, LoadOptions(overrides=overrides, check=False, cwd=tmp_path))


@pytest.mark.parametrize("replicas", [1, 2], ids=["one-replica", "two-replicas"])
@pytest.mark.parametrize("form", FORMS)
def test_each_platform_form_gets_what_its_platform_sets(form, replicas, tmp_path):
    loaded = _load(form, tmp_path, replicas)
    assert loaded.format == form.removesuffix("-gcloud")
    assert loaded.spec.total_replicas == replicas
    ids = replica_ids(loaded.spec)
    addresses = {rid: f"127.0.0.1:{2000 + i}" for i, rid in enumerate(ids)}
    primary = primary_replica(loaded.spec)
    env = replica_env(loaded.spec, primary, addresses, job_id="j", attempt=0, output_dir=str(tmp_path),
                      platform=loaded.format)
    expected = {"TF_CONFIG", "CLUSTER_SPEC"} if replicas > 1 else SINGLE[loaded.format]
    assert {k for k in ("TF_CONFIG", "CLUSTER_SPEC") if k in env} == expected
    if "TF_CONFIG" in env:
        config = json.loads(env["TF_CONFIG"])
        task_type = loaded.spec.chief_task_type if primary.role == "chief" else primary.role
        assert config["task"] == {"type": task_type, "index": 0}
        assert config["cluster"][task_type][0] == addresses[primary]
    if "CLUSTER_SPEC" in env:
        assert json.loads(env["CLUSTER_SPEC"])["task"] == {"type": "workerpool0", "index": 0}
