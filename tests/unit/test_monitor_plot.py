"""``plot``: the figure holds the job's series (read back from the drawn lines and the PNG)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from multiworker.cli import monitor_cmd
from multiworker.errors import UserError
from multiworker.job import Store
from multiworker.monitor.plot import collect_series, drawn_lines, plot_job
from multiworker.spec.model import JobSpec

pytest.importorskip("matplotlib")


@pytest.fixture
def job(mw_home, monkeypatch) -> tuple[Store, str]:
    """Two attempts: epoch 2 ran twice (the restart's value wins); samples at known times."""
    store = Store(mw_home)
    spec = JobSpec(name="plotme", module="m", pools={"worker": {"replicas": 2}})
    store.create_job(job_id="f00d0001", name="plotme", spec_json=spec.model_dump_json(),
                     job_dir=str(mw_home / "jobs" / "f00d0001"), output_dir=str(mw_home / "out"))
    store.update_job("f00d0001", state="Succeeded", started_at=1000.0, finished_at=1010.0)
    rows = [(0, 1, 0.9, 0.50), (0, 2, 0.7, 0.60), (1, 2, 0.6, 0.65), (1, 3, 0.4, 0.80)]
    for attempt, epoch, loss, acc in rows:
        store.add_metric("f00d0001", attempt, "worker-0", {"kind": "epoch", "epoch": epoch, "epochs": 3, "loss": loss,
                                                           "accuracy": acc, "images_per_sec": 999.0, "seconds": 1.0})
    clock = iter([1001.0, 1002.0, 1003.0])
    monkeypatch.setattr("multiworker.job.store.time.time", lambda: next(clock))
    for cpu in (100.0, 150.0, 50.0):
        store.add_samples("f00d0001", [("worker-0", cpu, int(cpu) << 20), ("worker-1", cpu / 2, int(cpu) << 19)])
    monkeypatch.undo()
    monkeypatch.setenv("MULTIWORKER_HOME", str(mw_home))
    return store, "f00d0001"


def test_series_and_figure_hold_the_job_data(job, tmp_path):
    store, job_id = job
    series = collect_series(store, job_id)
    assert series["epoch_metrics"]["loss"] == {"worker-0": [[1, 0.9], [2, 0.6], [3, 0.4]]}
    assert set(series["epoch_metrics"]) == {"loss", "accuracy"}  # bookkeeping fields are not curves
    assert series["cpu_percent"]["worker-1"] == [[1.0, 50.0], [2.0, 75.0], [3.0, 25.0]]
    assert series["memory_mib"]["worker-0"] == [[1.0, 100.0], [2.0, 150.0], [3.0, 50.0]]

    result = plot_job(store, job_id, tmp_path / "job.png")
    drawn = drawn_lines(result.figure)
    assert drawn == result.drawn
    assert drawn["Loss per epoch"] == {"loss": [[1.0, 0.9], [2.0, 0.6], [3.0, 0.4]]}
    assert drawn["Accuracy per epoch"] == {"accuracy": [[1.0, 0.5], [2.0, 0.65], [3.0, 0.8]]}
    assert drawn["CPU per replica"]["worker-0"] == [[1.0, 100.0], [2.0, 150.0], [3.0, 50.0]]
    assert drawn["Memory per replica"]["worker-1"] == [[1.0, 50.0], [2.0, 75.0], [3.0, 25.0]]

    import matplotlib.image

    assert (tmp_path / "job.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert matplotlib.image.imread(tmp_path / "job.png").shape == (800, 1200, 4)


def test_cli_plot_svg_json_and_bad_suffix(job, tmp_path):
    app = typer.Typer()
    monitor_cmd.register(app)
    runner = CliRunner()
    out = tmp_path / "charts" / "job.svg"
    result = runner.invoke(app, ["plot", "f00d", "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["drawn"]["Loss per epoch"]["loss"][-1] == [3.0, 0.4]
    assert out.read_text().lstrip().startswith("<?xml") and "<svg" in out.read_text()
    bad = runner.invoke(app, ["plot", "last", "-o", str(tmp_path / "job.gif")])
    assert isinstance(bad.exception, UserError) and ".png" in str(bad.exception)
