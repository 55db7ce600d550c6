"""The hypertune file read back as the library writes it, and the Optuna side of the search:
samplers per algorithm, scale types, stored studies that resume, interrupted trials queued again."""

from __future__ import annotations

import json

import optuna
import pytest

from multiworker.errors import UserError
from multiworker.tune import hypertune, search
from multiworker.tune.model import Param, Study


def _lines(path, records):
    path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def test_reads_the_librarys_format(tmp_path):
    path = tmp_path / "output.metrics"
    # cloudml-hypertune: values as strings, global_step a string, trial the CLOUD_ML_TRIAL_ID.
    _lines(path, [{"global_step": "100", "rmse": "5.5", "timestamp": 10.0, "trial": "1"},
                  {"global_step": "200", "rmse": "4.25", "timestamp": 11.0, "trial": "1"},
                  {"global_step": "0", "accuracy": "0.9", "timestamp": 12.0, "trial": "1"}])
    with path.open("a") as fh:
        fh.write("not json\n")
    found = hypertune.read_measurements(path, "rmse")
    assert [(m.step, m.value) for m in found] == [(100, 5.5), (200, 4.25)]
    assert hypertune.final_value(found, measurement="LAST_MEASUREMENT", goal="MINIMIZE") == 4.25
    assert hypertune.by_step(found) == {100: 5.5, 200: 4.25}
    assert hypertune.read_measurements(tmp_path / "missing", "rmse") == []


def test_best_measurement_follows_the_goal():
    ms = [hypertune.Measurement(1, 3.0, 0), hypertune.Measurement(2, 1.0, 0), hypertune.Measurement(3, 2.0, 0)]
    assert hypertune.final_value(ms, measurement="BEST_MEASUREMENT", goal="MINIMIZE") == 1.0
    assert hypertune.final_value(ms, measurement="BEST_MEASUREMENT", goal="MAXIMIZE") == 3.0
    assert hypertune.final_value([], measurement="LAST_MEASUREMENT", goal="MAXIMIZE") is None


def test_lines_are_filtered_by_trial_and_time(tmp_path):
    path = tmp_path / "output.metrics"
    _lines(path, [{"loss": "1", "trial": "2", "timestamp": 5.0, "global_step": "1"},
                  {"loss": "2", "trial": "3", "timestamp": 20.0, "global_step": "1"},
                  {"loss": "3", "trial": "2", "timestamp": 20.0, "global_step": "1"}])
    assert [m.value for m in hypertune.read_measurements(path, "loss", trial="2", since=10.0)] == [3.0]


def test_lines_of_another_trial_are_dropped_and_unnamed_ones_kept(tmp_path):
    path = tmp_path / "hypertune.metrics"
    _lines(path, [{"loss": "0.001", "trial": "7"}, {"loss": "2"}, {"loss": "3", "trial": "2"}])
    assert [m.value for m in hypertune.read_measurements(path, "loss", trial="2")] == [2.0, 3.0]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_a_metric_file_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    import os

    path = tmp_path / "hypertune.metrics"
    if kind == "symlink":
        target = tmp_path / "elsewhere"
        _lines(target, [{"loss": "0.001"}])
        path.symlink_to(target)
    elif kind == "fifo":
        os.mkfifo(path)  # opening it for reading must not block
    else:
        path.mkdir()
    with pytest.raises(hypertune.MetricFileRefused, match=f"{path} is a {'FIFO' if kind == 'fifo' else kind}: refused"):
        hypertune.read_measurements(path, "loss")


def test_a_huge_metric_file_is_read_from_its_end_only(tmp_path):
    path = tmp_path / "hypertune.metrics"
    with path.open("w") as fh:
        fh.write(json.dumps({"loss": "0.5"}) + "\n")
        fh.write("x" * (3 * hypertune.MAX_BYTES) + "\n")
        fh.write(json.dumps({"loss": "1.5", "global_step": "9"}) + "\n")
    assert [m.value for m in hypertune.read_measurements(path, "loss")] == [1.5]


def test_a_trial_never_reads_the_shared_default_file(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from multiworker.tune.runner import Tuner, _Running

    planted = tmp_path / "output.metrics"  # what any local user could write
    _lines(planted, [{"loss": "0.0000001", "global_step": "1"}, {"loss": "0.0000001", "trial": "1"}])
    monkeypatch.setattr(hypertune, "DEFAULT_METRIC_FILE", str(planted))
    run = _Running(trial=None, number=1, job_id="feed0001", proc=None, metric_file=tmp_path / "trial-1.metrics",
                   started=0.0)
    tuner = SimpleNamespace(study=SimpleNamespace(metric="loss"))
    assert Tuner._measurements(tuner, run) == []
    (tmp_path / "trial-1.metrics").symlink_to(planted)
    assert Tuner._measurements(tuner, run) == [] and "is a symlink: refused" in run.refused


STUDY = Study(metric="loss", goal="MINIMIZE", max_trials=12, params=(
    Param(name="lr", type="DOUBLE", min_value=1e-4, max_value=1.0, scale="UNIT_LOG_SCALE"),
    Param(name="units", type="INTEGER", min_value=10.0, max_value=1000.0, scale="UNIT_REVERSE_LOG_SCALE"),
    Param(name="act", type="CATEGORICAL", values=("relu", "tanh")),
    Param(name="batch", type="DISCRETE", values=(16.0, 32.0)),
))


def test_samples_stay_in_range_and_reverse_log_is_dense_at_the_top(tmp_path):
    ostudy = search.open_study(tmp_path, "s", STUDY.model_copy(update={"algorithm": "RANDOM_SEARCH"}), resume=False,
                               seed=0)
    values = []
    for _ in range(12):
        trial = ostudy.ask()
        v = search.suggest(trial, STUDY)
        ostudy.tell(trial, v["lr"])
        values.append(v)
    assert all(1e-4 <= v["lr"] <= 1 and 10 <= v["units"] <= 1000 and isinstance(v["units"], int) for v in values)
    assert {v["act"] for v in values} == {"relu", "tanh"} and {v["batch"] for v in values} <= {16.0, 32.0}
    assert sum(v["lr"] < 0.01 for v in values) >= 3  # log scale: about half below the geometric middle
    assert sum(v["units"] > 505 for v in values) >= 8  # reverse log: about 85% in the top half
    assert STUDY.param("batch").arg(32.0) == "--batch=32" and STUDY.param("lr").arg(0.5) == "--lr=0.5"


def test_grid_search_covers_the_grid_once(tmp_path):
    study = Study(metric="m", algorithm="GRID_SEARCH", max_trials=9, params=(
        Param(name="n", type="INTEGER", min_value=1.0, max_value=3.0),
        Param(name="act", type="CATEGORICAL", values=("a", "b"))))
    assert study.grid_size() == 6
    ostudy = search.open_study(tmp_path, "g", study, resume=False)
    seen = set()
    for _ in range(6):
        trial = ostudy.ask()
        v = search.suggest(trial, study)
        seen.add((v["n"], v["act"]))
        ostudy.tell(trial, 1.0)  # no study.stop() outside optimize when the grid is covered
    assert seen == {(n, a) for n in (1, 2, 3) for a in ("a", "b")}


def test_stored_study_resumes_only_with_the_same_search_space(tmp_path):
    search.open_study(tmp_path, "s", STUDY, resume=False)
    with pytest.raises(UserError, match="a study of that name exists; add --resume"):
        search.open_study(tmp_path, "s", STUDY, resume=False)
    with pytest.raises(UserError, match="no study 'other' to resume"):
        search.open_study(tmp_path, "other", STUDY, resume=True)
    more = STUDY.model_copy(update={"max_trials": 99, "parallel_trials": 4})  # budget may change
    assert search.open_study(tmp_path, "s", more, resume=True).study_name == "s"
    with pytest.raises(UserError, match="another search space"):
        search.open_study(tmp_path, "s", STUDY.model_copy(update={"goal": "MAXIMIZE"}), resume=True)
    assert search.study_names(tmp_path) == ["s"]


def test_interrupted_trial_is_failed_and_queued_again(tmp_path):
    ostudy = search.open_study(tmp_path, "s", STUDY, resume=False)
    trial = ostudy.ask()
    values = search.suggest(trial, STUDY)
    search.mark_interrupted(ostudy, ostudy.get_trials()[0])
    again = search.open_study(tmp_path, "s", STUDY, resume=True)
    assert search.interrupted_numbers(again) == {0}
    assert again.get_trials()[0].state == optuna.trial.TrialState.FAIL
    rerun = again.ask()
    assert search.suggest(rerun, STUDY) == values and rerun.user_attrs["rerun_of"] == 1
