"""The issue's gcloud command lines, pasted after `multiworker`, run here: real MNIST replicas, the cloud's TF_CONFIG.

A shim installed as trainer/task.py (fixtures/gcloud/task_shim.py) records the TF_CONFIG, argv and cwd each
replica saw, then trains the MNIST example for a few steps (MW_SHIM_ARGS). Two short training runs (the
multi-replica forms); local-run and the converted MNIST job run the shim alone (no TensorFlow).
"""

from __future__ import annotations

import json
import shlex
import shutil
import tarfile

import pytest
import yaml
from helpers import REPO, check_tf_config, mw, status

pytestmark = pytest.mark.integration

MNIST = REPO / "examples" / "mnist"
SHIM = REPO / "tests" / "fixtures" / "gcloud" / "task_shim.py"
SHORT = f"--epochs=1 --steps-per-epoch=2 --batch-size=32 --data={MNIST / 'data' / 'mnist.npz'}"


@pytest.fixture
def ctx(tmp_path):
    """A tutorial-shaped directory: trainer/ (the shim as task.py + the MNIST code), Dockerfile, config.yaml."""
    root = tmp_path / "ctx"
    trainer = root / "trainer"
    trainer.mkdir(parents=True)
    (trainer / "__init__.py").write_text("")
    shutil.copy(SHIM, trainer / "task.py")
    shutil.copy(MNIST / "trainer" / "task.py", trainer / "mnist_task.py")
    shutil.copy(MNIST / "trainer" / "model.py", trainer / "model.py")
    (root / "Dockerfile").write_text("FROM tensorflow/tensorflow:2.21.0\nWORKDIR /app\nCOPY trainer/ /app/trainer/\n"
                                     'ENTRYPOINT ["python"]\n')
    (root / "config.yaml").write_text(yaml.safe_dump({"trainingInput": {  # machines only, as the tutorials submit it
        "scaleTier": "CUSTOM", "masterType": "n1-standard-4", "workerType": "n1-standard-4", "workerCount": 1}}))
    return root


def run_line(line: str, ctx, home, *, train: bool = True) -> tuple[dict, dict[str, dict]]:
    """Run `multiworker gcloud ...` from ``ctx``; the job's status and what each replica recorded."""
    argv = shlex.split(line)
    assert argv[:2] == ["multiworker", "gcloud"]
    seen = ctx.parent / "seen"
    env = {"MW_CAPTURE_DIR": str(seen), "MW_SHIM_ARGS": SHORT, "MW_SHIM_TRAIN": "1" if train else "0"}
    proc = mw(*argv[1:], home=home, cwd=ctx, env=env)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    doc = status(home)
    assert doc["state"] == "Succeeded" and all(r["exit_code"] == 0 for r in doc["replicas"]), doc
    records = {p.stem: json.loads(p.read_text()) for p in sorted(seen.glob("*.json"))}
    assert sorted(records) == sorted(f"{r['role']}-{r['index']}" for r in doc["replicas"])
    return doc, records


def test_aiplatform_submit_with_config_of_machines_and_dockerfile(ctx, mw_home):
    doc, seen = run_line("multiworker gcloud ai-platform jobs submit training JOB --config config.yaml "
                         "--master-image-uri IMG --dockerfile Dockerfile --map-path gs://B=./gcs -- trainer/task.py "
                         "--bucket B", ctx, mw_home)
    assert doc["name"] == "JOB"
    check_tf_config(seen, {"master": 1, "worker": 1}, chief_type="master")  # no useChiefInTfConfig, as on AI Platform
    for record in seen.values():
        assert record["argv"] == ["--bucket", "B"] and record["cloud_flags"] == {"--bucket": "B"}
        assert record["cwd"] == str(ctx)  # the Dockerfile's WORKDIR, from the build context


def test_custom_jobs_create_with_python_packages_from_the_bucket(ctx, mw_home):
    gcs = ctx / "gcs"
    gcs.mkdir()
    with tarfile.open(gcs / "trainer-0.1.tar.gz", "w:gz") as tar:  # the sdist gcloud would upload
        tar.add(ctx / "trainer", arcname="trainer-0.1/trainer")
        tar.add(ctx / "config.yaml", arcname="trainer-0.1/PKG-INFO")
    doc, seen = run_line(
        "multiworker gcloud ai custom-jobs create --region R --display-name J "
        "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,executor-image-uri=IMG,python-module=trainer.task "
        "--worker-pool-spec=machine-type=n1-standard-4,replica-count=2,executor-image-uri=IMG,python-module=trainer.task "
        "--python-package-uris=gs://B/trainer-0.1.tar.gz --map-path gs://B=./gcs", ctx, mw_home)
    assert doc["name"] == "J"
    check_tf_config(seen, {"chief": 1, "worker": 2})
    metrics = json.loads((next((mw_home / "jobs").iterdir()) / "output" / "metrics.json").read_text())
    assert (metrics["workers"], metrics["steps_per_epoch"]) == (3, 2), metrics  # chief + 2 workers trained
    assert {r["cwd"] for r in seen.values()} == {str(next((mw_home / "packages").iterdir()) / "trainer-0.1")}


def test_custom_jobs_local_run(ctx, mw_home):
    """One replica (the shim only: the two runs above train), the module from --local-package-path."""
    _, seen = run_line("multiworker gcloud ai custom-jobs local-run --executor-image-uri IMG --local-package-path . "
                       "--python-module trainer.task -- --epochs 2", ctx, mw_home, train=False)
    assert list(seen) == ["chief-0"]
    assert seen["chief-0"]["tf_config"] is None  # one container, no cluster: as local-run runs it
    assert seen["chief-0"]["argv"] == ["--epochs", "2"] and seen["chief-0"]["cwd"] == str(ctx)


def test_mnist_converted_to_vertex_runs_with_the_clouds_tf_config(ctx, mw_home, tmp_path):
    """examples/mnist (2 workers) -> Vertex pools 0 + 1 -> run here: `chief` + `worker`, as Vertex gives them."""
    out = tmp_path / "vertex.yaml"
    proc = mw("convert", str(MNIST / "job.yaml"), "--to", "vertex", "--image", "gcr.io/p/mnist:1", "-o", str(out),
              home=mw_home)
    assert proc.returncode == 0, proc.stderr
    assert "worker 0 becomes Vertex AI's chief" in proc.stderr
    assert [p["replicaCount"] for p in yaml.safe_load(out.read_text())["jobSpec"]["workerPoolSpecs"]] == [1, 1]
    proc = mw("run", str(out), "-q", home=mw_home, cwd=ctx, env={"MW_CAPTURE_DIR": str(tmp_path / "seen"),
                                                                 "MW_SHIM_TRAIN": "0"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    seen = {p.stem: json.loads(p.read_text()) for p in sorted((tmp_path / "seen").glob("*.json"))}
    assert sorted(seen) == ["chief-0", "worker-0"]
    check_tf_config(seen, {"chief": 1, "worker": 1})
