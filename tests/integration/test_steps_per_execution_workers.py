"""trainer.fit's steps_per_execution "auto" on two real MWMS workers: the steps per call are agreed,
so a callback with batch hooks on one worker only keeps every worker at one step a call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from multiworker.procs import free_ports

pytestmark = pytest.mark.integration

WORKER = Path(__file__).with_name("_spe_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def _two_workers(tmp_path: Path, *args: str) -> list[dict]:
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(SRC), MULTIWORKER_JOB_ID="spe",
                   MULTIWORKER_OUTPUT_DIR=str(tmp_path), MULTIWORKER_THREADS="1",
                   TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen([sys.executable, str(WORKER), *args], env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True))
    try:
        outs = [p.communicate(timeout=240) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def test_workers_agree_on_several_steps_a_call(tmp_path):
    first, second = _two_workers(tmp_path)
    assert first["chosen"] == second["chosen"] and len(first["chosen"]) == 1 and first["chosen"][0] > 1
    assert first["weights"] == second["weights"]  # one model: the collectives paired up


def test_batch_hooks_on_one_worker_keep_every_worker_at_one_step(tmp_path):
    first, second = _two_workers(tmp_path, "--hooks-on", "0")
    assert first["chosen"] == second["chosen"] == [1]
    assert first["ends"] == list(range(30)) * 2  # its callback saw every step of both epochs
    assert first["weights"] == second["weights"]
