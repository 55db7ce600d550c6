"""A single-replica job run by `multiworker run` sees in ``os.environ`` what its platform would give it:
AI Platform's TF_CONFIG (set on every VM of every job), Vertex AI's CLUSTER_SPEC without TF_CONFIG."""

from __future__ import annotations

import json

import pytest
from helpers import mw

pytestmark = pytest.mark.integration

IMAGE = "gcr.io/p/trainer:v1"
SHOW = ("python -c \"import json, os; open('seen.json', 'w').write(json.dumps("
        "{k: os.environ.get(k) for k in ('TF_CONFIG', 'CLUSTER_SPEC')}))\"")


@pytest.mark.parametrize(("config", "expected"), [
    (f"trainingInput:\n  scaleTier: BASIC\n  masterConfig: {{imageUri: {IMAGE}}}\n  region: us-central1\n",
     {"TF_CONFIG": True, "CLUSTER_SPEC": True}),
    (f"workerPoolSpecs:\n  - machineSpec: {{machineType: n1-standard-4}}\n    replicaCount: 1\n"
     f"    containerSpec: {{imageUri: {IMAGE}}}\n", {"TF_CONFIG": False, "CLUSTER_SPEC": True}),
], ids=["aiplatform", "vertex"])
def test_single_replica_sees_its_platforms_variables(config, expected, tmp_path, mw_home):
    (tmp_path / "job.yaml").write_text(config)
    proc = mw("run", "job.yaml", "-q", "--image", f"{IMAGE}={SHOW}", home=mw_home, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    seen = json.loads((tmp_path / "seen.json").read_text())
    assert {k: v is not None for k, v in seen.items()} == expected
    if expected["TF_CONFIG"]:
        config = json.loads(seen["TF_CONFIG"])
        assert config["task"]["index"] == 0 and config["environment"] == "cloud"
        assert list(config["cluster"]) == [config["task"]["type"]] and len(config["cluster"][config["task"]["type"]]) == 1
