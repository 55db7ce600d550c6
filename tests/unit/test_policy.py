"""The restart/success policy as a table, and the restart loop driven without processes."""

from __future__ import annotations

import pytest

from multiworker.cluster import ReplicaId
from multiworker.policy import (
    Decision,
    all_exited,
    backoff_delay,
    decide,
    exit_description,
    exit_order,
    is_retryable,
    normalize_exit_code,
    shutdown_plan,
)
from multiworker.spec.model import JobSpec

W0, W1, C0, PS0, EV0 = (ReplicaId("worker", 0), ReplicaId("worker", 1), ReplicaId("chief", 0), ReplicaId("ps", 0),
                        ReplicaId("evaluator", 0))


def spec(restart="OnFailure", limit=3, success="chief", chief=False, ps=False, evaluator=False):
    pools = {"worker": {"replicas": 2}}
    if chief or ps:
        pools["chief"] = {}
    if ps:
        pools["ps"] = {}
    if evaluator:
        pools["evaluator"] = {}
    return JobSpec.model_validate({"name": "j", "module": "m", "pools": pools,
                                   "run_policy": {"restart_policy": restart, "backoff_limit": limit, "success_policy": success}})


TABLE = [
    # id, spec kwargs, replica, exit code, exits so far, restarts done, decision
    ("onfailure-retry", {}, W1, 1, {}, 0, Decision.RESTART),
    ("onfailure-limit-reached", {"limit": 1}, W1, 1, {}, 1, Decision.FAIL),
    ("onfailure-signal", {}, W1, 137, {}, 2, Decision.RESTART),
    ("never-fails", {"restart": "Never"}, W1, 137, {}, 0, Decision.FAIL),
    ("exitcode-signal-retries", {"restart": "ExitCode"}, W1, 137, {}, 0, Decision.RESTART),
    ("exitcode-sigterm-retries", {"restart": "ExitCode"}, W1, 143, {}, 0, Decision.RESTART),
    ("exitcode-app-error-fails", {"restart": "ExitCode"}, W1, 1, {}, 0, Decision.FAIL),
    ("exitcode-127-fails", {"restart": "ExitCode"}, W1, 127, {}, 0, Decision.FAIL),
    ("exitcode-128-retries", {"restart": "ExitCode"}, W1, 128, {}, 0, Decision.RESTART),
    ("always-retries", {"restart": "Always"}, W0, 2, {}, 0, Decision.RESTART),
    ("worker0-decides-without-chief", {}, W0, 0, {W0: 0}, 0, Decision.SUCCEED),
    ("worker1-success-waits", {}, W1, 0, {W1: 0}, 0, Decision.CONTINUE),
    ("chief-decides", {"chief": True}, C0, 0, {C0: 0}, 0, Decision.SUCCEED),
    ("worker0-not-primary-with-chief", {"chief": True}, W0, 0, {W0: 0}, 0, Decision.CONTINUE),
    ("ps-exit0-continues", {"ps": True}, PS0, 0, {PS0: 0}, 0, Decision.CONTINUE),
    ("ps-failure-restarts", {"ps": True}, PS0, 1, {}, 0, Decision.RESTART),
    ("evaluator-done-continues", {"evaluator": True}, EV0, 0, {EV0: 0}, 0, Decision.CONTINUE),
    ("all-workers-waits", {"success": "all_workers"}, W0, 0, {W0: 0}, 0, Decision.CONTINUE),
    ("all-workers-done", {"success": "all_workers"}, W1, 0, {W0: 0, W1: 0}, 0, Decision.SUCCEED),
    ("all-workers-with-chief", {"success": "all_workers", "chief": True}, W1, 0, {W0: 0, W1: 0}, 0, Decision.CONTINUE),
]


@pytest.mark.parametrize("kw,replica,code,exits,restarts,expected", [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_decide(kw, replica, code, exits, restarts, expected):
    assert decide(spec(**kw), replica, code, exits, restarts) is expected


@pytest.mark.parametrize("policy,code,expected", [
    ("OnFailure", 1, True), ("Never", 1, False), ("ExitCode", 1, False), ("ExitCode", 137, True), ("Always", 3, True),
])
def test_is_retryable(policy, code, expected):
    assert is_retryable(policy, code) is expected


def test_exit_codes_and_descriptions():
    assert normalize_exit_code(-9) == 137 and normalize_exit_code(1) == 1
    assert exit_description(-9) == "signal SIGKILL (exit code 137)"
    assert exit_description(1) == "exit code 1"


def test_backoff_grows_and_caps():
    s = spec()
    assert [backoff_delay(s, n) for n in range(8)] == [2, 4, 8, 16, 32, 60, 60, 60]


def run_loop(s: JobSpec, monitor: list[tuple[ReplicaId, int]]) -> tuple[str, int]:
    """Drive the decision loop with a fake monitor: a scripted sequence of exits across attempts."""
    restarts, exits = 0, {}
    for replica, code in monitor:
        decision = decide(s, replica, code, {**exits, replica: code}, restarts)
        exits[replica] = code
        if decision is Decision.RESTART:
            restarts, exits = restarts + 1, {}
        elif decision is Decision.FAIL:
            return "Failed", restarts
        elif decision is Decision.SUCCEED:
            return "Succeeded", restarts
    return "Running", restarts


def test_loop_recovers_after_one_failure():
    assert run_loop(spec(), [(W1, 137), (W1, 0), (W0, 0)]) == ("Succeeded", 1)


def test_loop_gives_up_after_backoff_limit():
    assert run_loop(spec(limit=2), [(W1, 1), (W1, 1), (W1, 1)]) == ("Failed", 2)


def test_exit_order_puts_the_likeliest_root_cause_first():
    # raw codes: worker-0 errored, worker-1 was killed, chief-0 succeeded, ps-0 errored too
    assert exit_order({C0: 0, W0: 1, PS0: 1, W1: -9}) == [W1, PS0, W0, C0]


def test_all_exited():
    assert all_exited([W0, W1], {W0: 0, W1: 1}) and not all_exited([W0, W1], {W0: 0})


@pytest.mark.parametrize("kw,running,expected", [
    ({}, [W1], {W1: 30.0}),
    ({"evaluator": True}, [W1, EV0], {W1: 30.0, EV0: 300.0}),
    ({"ps": True}, [W0, W1, PS0], {W0: 0.0, W1: 0.0, PS0: 0.0}),
], ids=["worker-grace", "evaluator-timeout", "ps-and-pss-workers-at-once"])
def test_shutdown_plan(kw, running, expected):
    assert shutdown_plan(spec(**kw), running) == expected
