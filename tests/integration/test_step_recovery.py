"""A SIGKILL in the middle of an epoch: the restarted 2-worker MNIST group resumes mid-epoch from
the last step-level backup instead of from the epoch's start, or from the step the chief reached
when it lost its peer."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
from helpers import REPO, mw_popen, no_processes_left, status, wait_for

from multiworker.job import Store
from multiworker.metrics_line import BOOKKEEPING_KEYS, RATE_KEYS
from multiworker.monitor.plot import collect_series
from multiworker.ui.views import Views

pytestmark = pytest.mark.integration
JOB = str(REPO / "examples" / "mnist" / "job.yaml")
STEPS = 150


def _kill_worker_1_mid_epoch(mw_home, backup_every: str, *, sigterm_chief: bool = False
                             ) -> tuple[dict, list[tuple[int, dict]]]:
    """Kill worker-1 once worker 0 reports step 20 (and SIGTERM worker 0 right after, as a launcher
    that sees the death first does); return the job's status and worker 0's epoch lines."""
    proc = mw_popen("run", JOB, "-q", "--set", "run_policy.backoff=0.5s", "--",
                    "--epochs", "1", "--steps-per-epoch", str(STEPS), "--backup-every", backup_every, home=mw_home)
    try:
        def progressed():  # a progress line past step 20: the backup of step 10 exists
            store = Store(mw_home)
            jobs = store.list_jobs()
            row = jobs and store.progress(jobs[0].id).get("worker-0")
            return jobs[0] if row and row["attempt"] == 0 and (row["step"] or 0) >= 20 else None

        job = wait_for(progressed, timeout=300, interval=0.2)
        pids = {r["idx"]: r["pid"] for r in Store(mw_home).replicas(job.id) if r["role"] == "worker"}
        os.kill(pids[1], signal.SIGKILL)
        if sigterm_chief:
            os.kill(pids[0], signal.SIGTERM)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out[-3000:]
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 1
    assert no_processes_left(doc["id"])
    return doc, [(m["attempt"], m["data"]) for m in Store(mw_home).metrics(doc["id"], "epoch") if m["replica"] == "worker-0"]


def test_kill_mid_epoch_resumes_from_step_backup(mw_home):
    doc, lines = _kill_worker_1_mid_epoch(mw_home, "10")
    before = [d for a, d in lines if a == 0]
    after = [d for a, d in lines if a == 1]
    assert not before, f"the kill came after the epoch ended: {lines}"
    assert len(after) == 1 and after[0]["steps"] == STEPS
    start = after[0].get("start_step") or 0
    assert 10 <= start < STEPS, f"restarted from step {start}, not from the last backup: {lines}"
    # The resumed epoch's bookkeeping (start_step, steps, seconds...) is neither a curve of `plot` or
    # of the dashboard's per-epoch chart, nor one of the metric values `status --json` shows.
    assert set(collect_series(Store(mw_home), doc["id"])["epoch_metrics"]) == {"loss", "accuracy"}, after
    assert set(Views(mw_home, ttl=0).series(doc["id"])["epoch_metrics"]) == {"loss", "accuracy"}, after
    assert doc["last_metric_values"].keys() - RATE_KEYS == {"loss", "accuracy"}, doc["last_metrics"]
    assert not doc["last_metric_values"].keys() & BOOKKEEPING_KEYS
    # Only the chief writes the backups: worker-1 takes part in each (the same count) but saves nothing.
    # How many there are follows from the step the restart resumed at (one every 10 steps), however
    # fast the machine ran: none when the kill landed in the epoch's last steps, as the test can see
    # step 20 late on a loaded machine.
    attempt = Path(doc["output_dir"]).parent / "attempt_1"
    (chief_n, chief_w), (other_n, other_w) = (_backups_logged(attempt / f"worker-{i}.log") for i in (0, 1))
    assert chief_n == other_n >= (STEPS - start) // 10 - 1, (start, chief_n, other_n)
    assert (chief_w, other_w) == (chief_n, 0)


def _backups_logged(log: Path) -> tuple[int, float]:
    """(backups taken, backups written by this worker) from StepBackup's last summary line in ``log``."""
    found = re.findall(r"backups: (\d+) taken, .* (\d+) written by this worker", log.read_text())
    assert found, f"no backup summary in {log}"
    return int(found[-1][0]), int(found[-1][1])


def test_chief_backs_up_the_step_reached_when_its_peer_is_killed(mw_home):
    """No periodic backup falls inside the run (every 1000 steps), so only the chief's backup after
    losing worker-1 lets the restart resume past step 20 (it would start at 0 otherwise)."""
    doc, lines = _kill_worker_1_mid_epoch(mw_home, "1000")
    after = [d for a, d in lines if a == 1]
    assert len(after) == 1 and after[0]["steps"] == STEPS, lines
    start = after[0].get("start_step") or 0
    assert 20 <= start < STEPS, f"restarted from step {start}, not from the step reached: {lines}"
    chief_log = Path(doc["output_dir"]).parent / "attempt_0" / "worker-0.log"
    assert f"a peer was lost: backed up epoch 1, step {start}" in chief_log.read_text()


def test_a_sigterm_that_beats_the_failed_collective_waits_for_the_chiefs_backup(mw_home):
    """The chief is SIGTERMed right after worker-1's SIGKILL, before its collective can fail: the
    SIGTERM waits for the call in flight, which fails with the peer's loss, and for the backup of
    the step reached (trainer/_stop_guard.py). Without the guard the chief dies at once and the
    restart starts at step 0. A SIGTERM that lands between two calls (1 try in 14 here: the
    chief is in Python only between calls) ends the chief at once by design; that try says
    nothing, and the scenario runs again."""
    for attempt in range(3):
        home = mw_home / f"try{attempt}"
        home.mkdir()
        doc, lines = _kill_worker_1_mid_epoch(home, "1000", sigterm_chief=True)
        chief_log = (Path(doc["output_dir"]).parent / "attempt_0" / "worker-0.log").read_text()
        if "peer was lost" in chief_log or "UNAVAILABLE" in chief_log or "Unavailable" in chief_log:
            break
    after = [d for a, d in lines if a == 1]
    start = (after[0].get("start_step") or 0) if after else 0
    assert f"a peer was lost: backed up epoch 1, step {start}" in chief_log, chief_log[-3000:]
    assert 20 <= start < STEPS, f"restarted from step {start}, not from the step reached: {lines}"
