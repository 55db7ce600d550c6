"""trainer.fit's steps_per_execution "auto" on two real MWMS workers: the steps per call are agreed,
so a callback with batch hooks on one worker only keeps every worker at one step a call."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import two_workers

pytestmark = pytest.mark.integration

WORKER = Path(__file__).with_name("_spe_worker.py")


def _two_workers(tmp_path: Path, *args: str) -> list[dict]:
    env = {"MULTIWORKER_JOB_ID": "spe", "MULTIWORKER_OUTPUT_DIR": str(tmp_path), "MULTIWORKER_THREADS": "1"}
    return two_workers(WORKER, *args, env=env)


def test_workers_agree_on_several_steps_a_call(tmp_path):
    first, second = _two_workers(tmp_path)
    assert first["chosen"] == second["chosen"] and len(first["chosen"]) == 1 and first["chosen"][0] > 1
    assert first["weights"] == second["weights"]  # one model: the collectives paired up


def test_batch_hooks_on_one_worker_keep_every_worker_at_one_step(tmp_path):
    first, second = _two_workers(tmp_path, "--hooks-on", "0")
    assert first["chosen"] == second["chosen"] == [1]
    assert first["ends"] == list(range(30)) * 2  # its callback saw every step of both epochs
    assert first["weights"] == second["weights"]
