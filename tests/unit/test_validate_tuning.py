"""`multiworker validate` on the tuning configs the examples ship: checked as `tune` reads them, with their trial job."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TAXI = REPO / "examples" / "taxifare"


def validate(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "multiworker", "validate", *args], capture_output=True, text=True,
                          cwd=REPO)


def test_aiplatform_hyperparameters_without_a_job_say_how_to_tune():
    proc = validate(str(TAXI / "hptuning.yaml"))
    assert proc.returncode == 0, proc.stderr
    assert "valid aiplatform tuning config: minimize rmse over lr, nbuckets, nnsize, 10 trial(s)" in proc.stdout
    assert "multiworker tune JOB.yaml --config" in proc.stdout


def test_vertex_tuning_job_checks_its_trial_job_with_the_mapping_flags():
    proc = validate(str(TAXI / "vertex-hp-job.yaml"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert "packageUris[0]: gs://my-bucket/taxifare/src is a Cloud Storage path" in proc.stderr  # not `displayName`
    proc = validate(str(TAXI / "vertex-hp-job.yaml"), "--map-path", f"gs://my-bucket/taxifare/src={TAXI}")
    assert proc.returncode == 0, proc.stderr
    assert "valid vertex tuning config" in proc.stdout and "trial job: valid vertex spec" in proc.stdout
    assert "chief x1, worker x1" in proc.stdout


def test_a_broken_study_is_one_line(tmp_path):
    bad = tmp_path / "hp.yaml"
    bad.write_text((TAXI / "hptuning.yaml").read_text().replace("goal: MINIMIZE", "goal: SMALLEST"))
    proc = validate(str(bad))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "goal" in proc.stderr, proc.stderr
