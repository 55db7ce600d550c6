"""Parsing --inject-failure."""

import signal

import pytest

from multiworker.cluster import ReplicaId
from multiworker.errors import UserError
from multiworker.faults import check_injections, parse_injection
from multiworker.spec.model import JobSpec


@pytest.mark.parametrize("text,replica,after,sig", [
    ("worker-1@15s:KILL", ReplicaId("worker", 1), 15, signal.SIGKILL),
    ("worker-1@15s", ReplicaId("worker", 1), 15, signal.SIGKILL),
    ("chief-0@1m:TERM", ReplicaId("chief", 0), 60, signal.SIGTERM),
    ("ps-0@2.5:SIGINT", ReplicaId("ps", 0), 2.5, signal.SIGINT),
    ("worker-0@3s:9", ReplicaId("worker", 0), 3, signal.SIGKILL),
])
def test_parse(text, replica, after, sig):
    inj = parse_injection(text)
    assert (inj.replica, inj.after, inj.signal) == (replica, after, sig)


@pytest.mark.parametrize("text,match", [
    ("worker-1", "missing '@WHEN'"),
    ("worker-1@epoch:0", "whole number >= 1"),
    ("worker-1@step:-3", "whole number"),
    ("workr-1@5s", "not a replica name"),
    ("worker-1@soon", "not a duration"),
    ("worker-1@5s:BOOM", "unknown signal"),
])
def test_parse_errors(text, match):
    with pytest.raises(UserError, match=match):
        parse_injection(text)


def test_target_must_exist():
    spec = JobSpec.model_validate({"name": "j", "module": "m", "pools": {"worker": {"replicas": 2}}})
    check_injections(spec, [parse_injection("worker-1@1s")])
    with pytest.raises(UserError, match="has no worker-2"):
        check_injections(spec, [parse_injection("worker-2@1s")])


def test_injector_follows_the_jobs_progress_for_a_silent_replica():
    from multiworker.faults import Injector

    injector = Injector([parse_injection("worker-1@epoch:2"), parse_injection("worker-1@step:15")])
    injector.observe("worker-0", {"kind": "epoch", "epoch": 1, "steps": 10})
    assert [i.trigger for i in injector.due(0.0)] == []
    injector.observe("worker-0", {"kind": "progress", "epoch": 2, "step": 5, "steps": 10})
    assert [i.trigger for i in injector.due(0.0)] == ["step"]
    injector.observe("worker-0", {"kind": "epoch", "epoch": 2, "steps": 10})
    assert [i.trigger for i in injector.due(0.0)] == ["epoch"] and injector.pending == []


def test_an_injection_after_the_last_epoch_is_called_out_with_a_mid_training_one():
    from multiworker.faults import Injector

    injector = Injector([parse_injection("worker-1@epoch:2")])
    injector.observe("worker-0", {"kind": "epoch", "epoch": 1, "epochs": 2, "steps": 468})
    assert not injector.training_done()
    injector.observe("worker-0", {"kind": "epoch", "epoch": 2, "epochs": 2, "steps": 468})
    (fired,) = injector.due(0.0)
    assert injector.training_done()
    advice = injector.advice(fired)
    assert "last epoch (2) had finished" in advice and "worker-1@step:234" in advice and "@epoch:1" in advice


def test_the_summary_notes_injections_that_proved_nothing():
    from multiworker.cli.run_cmd import injection_notes

    events = [{"reason": "InjectedFailure", "message": "worker-1@step:300:KILL: sent SIGKILL to worker-1"},
              {"reason": "InjectedFailure", "message": "worker-1@epoch:2:KILL: sent SIGKILL ...; the last epoch (2) had "
                                                       "finished, so this tests no recovery"},
              {"reason": "InjectionNotFired", "message": "worker-0@step:9999:KILL: never fired, the job ended first"},
              {"reason": "Preempted", "message": "ps-0@epoch:2:PREEMPT=10s: SIGTERM to ps-0 ...; the last epoch (2) "
                                                 "had finished, so this tests no recovery"},
              {"reason": "Preempted", "message": "ps-0@step:5:PREEMPT=10s: SIGTERM to ps-0 (pid 7) at step 5"},
              {"reason": "Restarting", "message": "last epoch"}]
    assert [n.split(":")[0] for n in injection_notes(events)] == ["worker-1@epoch", "worker-0@step", "ps-0@epoch"]
