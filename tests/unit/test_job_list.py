"""``multiworker list`` never cuts a job id or a state: in a narrow terminal names and studies are cut
and the least needed columns left out; a pipe gets every column in full."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from multiworker.cli.jobs_cmd import fit_columns, render_list

JOB_ID = "20261126-021000-9fa2c3d4"
ROWS = [
    {"id": JOB_ID, "name": "taxifare-hyperparameter-trial-17", "study": "taxifare-learning-rate-and-layers",
     "state": "Succeeded", "running": 0, "replicas": 4, "restarts": 1, "age_seconds": 3600.0, "duration_seconds": 95.0},
    {"id": "20261126-020000-00ab11cd", "name": "mnist", "study": None, "state": "DeadlineExceeded", "running": 0,
     "replicas": 2, "restarts": 0, "age_seconds": 7200.0, "duration_seconds": 60.0},
]


@pytest.mark.parametrize("width", [40, 60, 80, 120])
def test_a_terminal_of_any_width_shows_whole_ids_and_states(width):
    out = io.StringIO()
    render_list(ROWS, Console(file=out, width=width, force_terminal=True, color_system=None))
    lines = out.getvalue().splitlines()
    assert JOB_ID in lines[1] and "Succeeded" in lines[1]
    assert "20261126-020000-00ab11cd" in lines[2] and "DeadlineExceeded" in lines[2]
    if width >= 80:
        assert all(len(line) <= width for line in lines), lines


def test_a_pipe_gets_every_column_in_full():
    out = io.StringIO()
    render_list(ROWS, Console(file=out, width=80, color_system=None))  # a file: not a terminal
    text = out.getvalue()
    for value in (JOB_ID, "taxifare-hyperparameter-trial-17", "taxifare-learning-rate-and-layers", "DURATION"):
        assert value in text


def test_names_are_cut_before_columns_are_left_out():
    header = ["ID", "NAME", "STATE", "AGE"]
    rows = [["a" * 24, "n" * 30, "Succeeded", "1h"]]
    shown, widths = fit_columns(header, rows, 24 + 2 + 12 + 2 + 9 + 2 + 3)
    assert shown == header and widths == [24, 12, 9, 3]
    shown, _ = fit_columns(header, rows, 24 + 2 + 8 + 2 + 9)
    assert shown == ["ID", "NAME", "STATE"]
