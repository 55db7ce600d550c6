"""A tutorial trainer (Keras's own fit, no multiworker.trainer) run as two workers: the logs inside an
epoch are the true values, not tf-keras's sum over the workers (docs/environment.md)."""

from __future__ import annotations

import json

import pytest
from helpers import PROGRAMS, mw

pytestmark = pytest.mark.integration


def test_in_epoch_logs_are_the_true_values_under_two_workers(tmp_path, mw_home):
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: tutorial\nmodule: keras_tutorial\nworking_dir: {PROGRAMS}\n"
                    "pools: {worker: {replicas: 2}}\nrun_policy: {restart_policy: Never}\n")
    proc = mw("run", str(spec), home=mw_home, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    seen = [json.loads(line.split("SEEN ", 1)[1]) for line in proc.stdout.splitlines() if "SEEN " in line]
    assert len(seen) == 2
    for worker in seen:
        assert worker["reduction"] == "first"
        # After the epoch's last batch Keras's running values are the epoch's: summed over two
        # workers they would be twice as large.
        assert worker["batch"] == pytest.approx(worker["epoch"], rel=1e-6)
        assert 0 <= worker["batch"]["accuracy"] <= 1
    assert seen[0] == seen[1]
