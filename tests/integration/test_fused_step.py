"""trainer.fit's fused step (gradients and metrics in one all-reduce) on two real MWMS workers.

Each worker trains the same seeded model twice, with Keras's train step and with the fused one,
on data of its own: the per-step logs (Keras's logged "first", as trainer.fit sets) and the weights must be the same to the last bit, on both
workers. Dense gradients take the fused path; an embedding's sparse gradients, Keras's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from multiworker.procs import free_ports

pytestmark = pytest.mark.integration

WORKER = Path(__file__).with_name("_fused_step_worker.py")
SRC = Path(__file__).resolve().parents[2] / "src"


def _two_workers(*args: str) -> list[dict]:
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs = []
    for index in range(2):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(SRC),
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


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_fused_step_gives_keras_logs_and_weights(sparse):
    workers = _two_workers(*(["--sparse"] if sparse else []))
    for result in workers:
        assert result["fused"]["installed"] and result["fused"]["fused_step"]
        assert not result["keras"]["fused_step"]
        assert len(result["fused"]["steps"]) == 8
        assert set(result["fused"]["steps"][0]) == {"loss", "accuracy", "mse", "auc"}
        assert result["fused"]["steps"] == result["keras"]["steps"]
        assert result["fused"]["weights"] == result["keras"]["weights"]
    assert workers[0]["fused"] == workers[1]["fused"]  # one model: the same weights and logs everywhere
    # Why trainer.fit logs "first": Keras's default sums every step's already-global values over
    # the workers, so its per-step logs are twice the true values with two workers.
    default, true = workers[0]["keras_default"]["steps"][0], workers[0]["fused"]["steps"][0]
    assert default["loss"] == pytest.approx(2 * true["loss"]) and default["accuracy"] == pytest.approx(2 * true["accuracy"])
