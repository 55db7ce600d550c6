"""`multiworker doctor`: one fixture per mistake (tests/fixtures/doctor/*), each reported at the line
marked ``# doctor: CODE``; every example job is clean; exit codes 0, 1, 2."""

from __future__ import annotations

import datetime
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from multiworker.containers.vertex_images import prebuilt_tf_minor
from multiworker.doctor import diagnose

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "doctor"
EXAMPLE_JOBS = sorted(p for p in (REPO / "examples").glob("*/job*.yaml"))


def _marked(directory: Path) -> tuple[str, Path, int]:
    """(code, file, line) of the one ``# doctor: CODE`` marker in a fixture."""
    for path in sorted(directory.rglob("*")):
        if path.suffix in (".py", ".yaml"):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if "# doctor: " in line:
                    return line.split("# doctor: ")[1].strip(), path, number
    raise AssertionError(f"{directory} has no marker")


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.iterdir() if p.is_dir()))
def test_each_mistake_is_found_at_its_line(name, monkeypatch):
    code, path, line = _marked(FIXTURES / name)
    if code == "gcs-without-package" and importlib.util.find_spec("tensorflow_io_gcs_filesystem"):
        pytest.skip("tensorflow-io-gcs-filesystem is installed here: nothing to find")
    findings, _ = diagnose(FIXTURES / name / "job.yaml", today=datetime.date(2026, 1, 1))
    assert [(f.code, Path(f.file).resolve(), f.line) for f in findings] == [(code, path.resolve(), line)], findings
    assert findings[0].fix


@pytest.mark.parametrize("job", EXAMPLE_JOBS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_example_is_clean(job):
    findings, notes = diagnose(job)
    assert findings == [] and notes == []


def test_vertex_image_names_old_and_new():
    assert prebuilt_tf_minor("us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-11.py310:latest") == 11
    assert prebuilt_tf_minor("gcr.io/cloud-aiplatform/training/tf-gpu.2-8:latest") == 8
    assert prebuilt_tf_minor("gcr.io/my-project/trainer:1") is None


@pytest.mark.parametrize("args,code", [
    (["examples/mnist/job.yaml"], 0),
    (["tests/fixtures/doctor/keras3/job.yaml"], 1),
    (["nope/job.yaml"], 2),
    (["tests/fixtures/doctor/keras3/trainer/task.py"], 2),
], ids=["clean", "finding", "missing-file", "not-a-spec"])
def test_exit_codes(args, code):
    proc = subprocess.run([sys.executable, "-m", "multiworker", "doctor", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    if code == 2:
        assert proc.stderr.startswith("error: ") and len(proc.stderr.strip().splitlines()) == 1


def test_a_pasted_gcloud_line_is_diagnosed(monkeypatch):
    """The gcloud line's package (local-package-path=.) is the trainer's source."""
    from multiworker.doctor import diagnose_gcloud

    monkeypatch.chdir(FIXTURES / "keras3")
    image = "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-11.py310:latest"
    findings, _ = diagnose_gcloud([
        "ai", "custom-jobs", "create", "--region", "us-central1", "--display-name", "k3",
        f"--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,executor-image-uri={image},"
        "local-package-path=.,python-module=trainer.task",
        "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1"])
    assert [(f.code, Path(f.file).name, f.line) for f in findings] == [("keras3-mwms", "task.py", 1)]
