"""trainer.fit's fused step (gradients and metrics in one all-reduce) on two real MWMS workers.

Each worker trains the same seeded model twice, with Keras's train step and with the fused one,
on data of its own: the per-step logs (Keras's logged "first", as trainer.fit sets) and the weights must be the same to the last bit, on both
workers. Dense gradients take the fused path; an embedding's sparse gradients, Keras's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import two_workers

pytestmark = pytest.mark.integration

WORKER = Path(__file__).with_name("_fused_step_worker.py")


def _two_workers(*args: str) -> list[dict]:
    return two_workers(WORKER, *args)


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
