"""The tutorials' cloud job configs run here unchanged: real MNIST replicas, the cloud's TF_CONFIG.

Each config runs through `multiworker run` with its image mapped to the MNIST trainer (--image or
--dockerfile) and gs://my-bucket mapped to a temp dir; a shim entry point (fixtures/cloud/
cloud_capture.py) records the TF_CONFIG and argv each replica saw, then runs trainer.task.
"""

from __future__ import annotations

import json
import shutil

import pytest
from helpers import REPO, check_tf_config, mw, status

pytestmark = pytest.mark.integration

CLOUD = REPO / "tests" / "fixtures" / "cloud"
VERTEX_IMAGE = "us-docker.pkg.dev/my-project/trainers/mnist:latest"
AIP_IMAGE = "gcr.io/my-project/mnist-trainer:latest"
ENTRY = "python -m cloud_capture"


@pytest.fixture
def job(tmp_path, mw_home):
    """A build context (trainer/ from examples/mnist + the capture shim) and a runner for configs."""
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "trainer").symlink_to(REPO / "examples" / "mnist" / "trainer", target_is_directory=True)
    shutil.copy(CLOUD / "cloud_capture.py", ctx / "cloud_capture.py")
    shutil.copy(CLOUD / "capture.Dockerfile", ctx / "Dockerfile")
    gcs, seen = tmp_path / "gcs", tmp_path / "seen"

    def run(config: str, *options: str, state: str = "Succeeded", restarts: int = 0) -> tuple[dict, dict[str, dict]]:
        if "--" in options:  # keep the trainer's own args last
            cut = options.index("--")
            options = (*options[:cut], "--map-path", f"gs://my-bucket={gcs}", *options[cut:])
        else:
            options = (*options, "--map-path", f"gs://my-bucket={gcs}")
        proc = mw("run", str(CLOUD / config), "-q", *options, home=mw_home, cwd=ctx, env={"MW_CAPTURE_DIR": str(seen)})
        assert proc.returncode == (0 if state == "Succeeded" else 1), proc.stdout[-4000:] + proc.stderr[-2000:]
        doc = status(mw_home)
        assert doc["state"] == state and doc["restarts"] == restarts, doc
        if state != "Succeeded":
            return doc, {}
        assert all(r["state"] == "Succeeded" and r["exit_code"] == 0 for r in doc["replicas"]), doc["replicas"]
        records = {p.stem: json.loads(p.read_text()) for p in sorted(seen.glob("*.json"))}
        assert sorted(records) == sorted(f"{r['role']}-{r['index']}" for r in doc["replicas"])
        return doc, records

    run.ctx, run.gcs = ctx, gcs
    return run


def test_vertex_config_two_pools(job):
    doc, seen = job("vertex_config.yaml", "--image", f"{VERTEX_IMAGE}={ENTRY}")
    check_tf_config(seen, {"chief": 1, "worker": 1})
    output = job.gcs / "mnist-vertex"
    assert doc["output_dir"] == str(output)
    assert (output / "metrics.json").exists()
    for record in seen.values():
        assert record["argv"] == ["--epochs=1", "--steps-per-epoch=3"]
        assert record["aip_model_dir"] == f"{output}/model"
        assert record["cwd"] == str(job.ctx)


def test_aiplatform_config_chief_and_worker(job):
    _, seen = job("aiplatform_config.yaml", "--image", f"gcr.io/my-project/mnist-trainer={ENTRY}")
    check_tf_config(seen, {"chief": 1, "worker": 1})  # useChiefInTfConfig: true
    for record in seen.values():
        assert record["cloud_flags"] == {"--job-dir": str(job.gcs / "mnist-aiplatform")}


def test_aiplatform_config_master(job):
    """useChiefInTfConfig false: the primary's TF_CONFIG task type is `master`, as TF 1 expected."""
    _, seen = job("aiplatform_config.yaml", "--image", f"{AIP_IMAGE}={ENTRY}", "--set", "chief_task_type=master")
    check_tf_config(seen, {"master": 1, "worker": 1}, chief_type="master")


def test_tfjob_three_workers_with_dockerfile(job):
    _, seen = job("tfjob.yaml", "--dockerfile", str(job.ctx / "Dockerfile"))
    check_tf_config(seen, {"worker": 3})
    for record in seen.values():
        assert record["cloud_flags"] == {"--saved_model_path": str(job.gcs / "saved_model_dir"),
                                         "--checkpoint_path": str(job.gcs / "checkpoints")}
        assert record["cwd"] == str(job.ctx)


def test_vertex_config_restarts_after_a_kill(job):
    """Vertex AI restarts only after system failures: locally ExitCode, so a killed replica restarts the group."""
    doc, seen = job("vertex_config.yaml", "--image", f"{VERTEX_IMAGE}={ENTRY}", "--inject-failure", "worker-0@epoch:1:KILL",
                    "--set", "run_policy.backoff=1s", "--", "--epochs", "3", "--steps-per-epoch", "20",
                    restarts=1)
    check_tf_config(seen, {"chief": 1, "worker": 1})


def test_tfjob_never_fails_after_a_kill(job):
    """restartPolicy: Never (the TFJob's) means a killed worker fails the job, as on Kubernetes."""
    job("tfjob.yaml", "--dockerfile", str(job.ctx / "Dockerfile"), "--set", "pools.worker.replicas=2",
        "--inject-failure", "worker-1@epoch:1:KILL", "--", "--epochs", "3", "--steps-per-epoch", "20", state="Failed")
