"""PREEMPT=<notice> as a spot VM does it (SIGTERM, the notice, SIGKILL), and the steps it costs:
none with multiworker.trainer (the chief backs up the step it reached as its peer goes), at most
the saving interval with the tutorial's plain BackupAndRestore."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import REPO, mw, status

from multiworker.job import Store

pytestmark = pytest.mark.integration
MNIST = str(REPO / "examples" / "mnist" / "job.yaml")
TUTORIAL = str(Path(__file__).parent / "tutorial" / "job.yaml")
_RESUMED = re.compile(r"step (\d+) at the interruption, (\d+) reached in that attempt; resumed from step (\d+): "
                      r"(\d+) steps lost")


def _resumed(home: Path, job_id: str) -> tuple[int, int, int, int]:
    """(step at the SIGTERM, step reached, step resumed from, steps lost) from the Resumed event."""
    (event,) = [e for e in Store(home).events(job_id) if e["reason"] == "Resumed"]
    at_signal, reached, resumed, lost = map(int, _RESUMED.search(event["message"]).groups())
    return at_signal, reached, resumed, lost


def test_preempted_mnist_worker_loses_no_step(mw_home):
    """Preempted once epoch 1 (60 steps) is reported, i.e. inside epoch 2 on any machine."""
    proc = mw("run", MNIST, "-q", "--inject-failure", "worker-1@epoch:1:PREEMPT=10s", "--set", "run_policy.backoff=1s",
              "--", "--epochs", "2", "--steps-per-epoch", "60", home=mw_home)
    assert proc.returncode == 0, proc.stdout[-3000:]
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    at_signal, reached, resumed, lost = _resumed(mw_home, doc["id"])
    assert at_signal >= 60 and resumed >= at_signal and lost == 0, (at_signal, reached, resumed)
    assert "0 steps lost" in doc["message"]


def test_preempted_tutorial_trainer_loses_at_most_its_backup_interval(mw_home, tmp_path):
    """The tutorial's trainer ignores SIGTERM under MultiWorkerMirroredStrategy (TensorFlow's own
    handler only logs it), trains through the notice and is SIGKILLed: the restart resumes from its
    last BackupAndRestore save, every 25 steps here (a step takes at least 0.05 s, so the 10 s notice
    ends before the 300 steps do on any machine)."""
    proc = mw("run", TUTORIAL, "-q", "--inject-failure", "worker-1@step:60:PREEMPT=10s", "--",
              "--steps", "300", "--save-freq", "25", "--step-seconds", "0.05", "--backup-dir", str(tmp_path / "backup"),
              home=mw_home)
    assert proc.returncode == 0, proc.stdout[-3000:]
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    events = [e["reason"] for e in Store(mw_home).events(doc["id"])]
    assert events.index("Preempted") < events.index("PreemptionKill")  # the notice ran out: SIGKILL
    at_signal, reached, resumed, lost = _resumed(mw_home, doc["id"])
    # redone: trained after the last save; a SIGKILL during a save falls back to the save before
    assert at_signal >= 60 and resumed % 25 == 0 and 0 <= reached - resumed < 2 * 25, (at_signal, reached, resumed)
    assert lost <= 25 and f"{lost} steps lost" in doc["message"]
