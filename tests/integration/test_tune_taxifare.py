"""`multiworker tune` on the taxi-fare example: 4 short trials, 2 at a time, each a 2-worker job
(real TensorFlow), every metric read from the trial's hypertune file, the best one reported."""

from __future__ import annotations

import json

import pytest
from helpers import REPO, mw, no_processes_left

pytestmark = pytest.mark.integration

TAXI = REPO / "examples" / "taxifare"
SHORT = ["--num_examples_to_train_on", "320", "--num_evals", "2", "--eval_steps", "3"]


def test_taxifare_four_trials_two_parallel(mw_home, tmp_path):
    proc = mw("tune", str(TAXI / "job.yaml"), "--config", str(TAXI / "hptuning.yaml"), "--max-trials", "4",
              "--parallel", "2", "--seed", "7", "--", *SHORT, home=mw_home)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "study taxifare" in proc.stdout and "best: trial" in proc.stdout

    show = mw("tune", "show", "taxifare", "--json", "-o", str(tmp_path / "study.png"), home=mw_home)
    assert show.returncode == 0, show.stderr
    doc = json.loads(show.stdout)
    trials = doc["trials"]
    assert [t["trial"] for t in trials] == [1, 2, 3, 4]
    assert all(t["state"] == "Succeeded" for t in trials), trials
    for t in trials:
        lines = [json.loads(line) for line in (mw_home / "studies" / "taxifare" / f"trial-{t['trial']}" /
                                               "hypertune.metrics").read_text().splitlines()]
        assert [line["global_step"] for line in lines] == ["5", "10"]  # the chief's report per evaluation
        assert all(line["trial"] == str(t["trial"]) for line in lines)
        assert t["metric"] == pytest.approx(float(lines[-1]["rmse"]))  # LAST_MEASUREMENT
        assert 1e-4 <= t["values"]["lr"] <= 0.1 and 5 <= t["values"]["nbuckets"] <= 20
        assert t["values"]["nnsize"] in ("32 8", "64 16", "16 4")
    best = min(trials, key=lambda t: t["metric"])
    assert doc["best"]["trial"] == best["trial"]
    assert f"best: trial {best['trial']}" in proc.stdout
    assert (tmp_path / "study.png").stat().st_size > 10_000

    # Two at a time: trials 1 and 2 overlapped; each was a whole 2-worker job, tagged with the study.
    jobs = {j["id"]: j for j in json.loads(mw("list", "--json", home=mw_home).stdout)}
    assert {jobs[t["job_id"]]["study"] for t in trials} == {"taxifare"}
    assert {jobs[t["job_id"]]["name"] for t in trials} == {f"taxifare-trial-{n}" for n in range(1, 5)}
    first, second = (jobs[trials[i]["job_id"]] for i in (0, 1))
    assert second["started_at"] < first["finished_at"]
    status = json.loads(mw("status", trials[0]["job_id"], "--json", home=mw_home).stdout)
    assert sorted(r["name"] for r in status["replicas"]) == ["worker-0", "worker-1"]
    assert all(no_processes_left(t["job_id"]) for t in trials)
