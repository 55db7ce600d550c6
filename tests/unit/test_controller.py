"""The group controller's real restart loop, driven by a fake ReplicaGroup with scripted exits:
the policy tests end to end without processes (attempts, restarts, deadline, injection, metrics)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from multiworker.backends.base import Backend, Placement, ReplicaGroup
from multiworker.backends.controller import GroupController
from multiworker.cluster import ReplicaId
from multiworker.errors import StartFailed, UserError
from multiworker.job import JobState, Store
from multiworker.job.observer import Observer
from multiworker.jobs import create_job
from multiworker.spec.load import load_spec

W0, W1, PS0 = ReplicaId("worker", 0), ReplicaId("worker", 1), ReplicaId("ps", 0)
RUNNING = None  # a poll result: still running


class FakeGroup(ReplicaGroup):
    """Replicas that exist only in a script: per attempt, each replica's poll results in turn
    (the last one repeats) and the log chunks it prints. A signal or a stop ends a replica."""

    def __init__(self, script: list[dict[ReplicaId, list[int | None]]], logs: dict[ReplicaId, list[bytes]] | None = None,
                 on_poll=None):
        self.script = script
        self.logs = logs or {}
        self.on_poll = on_poll
        self.attempt = -1
        self.started: dict[ReplicaId, dict] = {}
        self.forced: dict[ReplicaId, int] = {}
        self.calls: list[tuple] = []
        self.polls = 0

    def place(self, replicas, attempt):
        self.attempt = attempt
        self.started, self.forced = {}, {}
        self.calls.append(("place", attempt))
        return {rid: Placement(f"10.0.0.{i + 1}", 5000 + i, node=f"node-{i}") for i, rid in enumerate(replicas)}

    def start(self, replica, cmd, cwd, env, log_path):
        self.started[replica] = {"cmd": cmd, "cwd": cwd, "env": env, "log_path": log_path, "polls": 0}
        return 100 + len(self.started)

    def poll(self):
        self.polls += 1
        if self.on_poll:
            self.on_poll(self)
        out = {}
        for rid, st in self.started.items():
            if rid in self.forced:
                out[rid] = self.forced[rid]
                continue
            steps = self.script[self.attempt].get(rid, [RUNNING])
            out[rid] = steps[min(st["polls"], len(steps) - 1)]
            st["polls"] += 1
        return out

    def signal(self, replica, signum):
        self.calls.append(("signal", replica, signum))
        if replica not in self.started or self.poll_one(replica) is not None:
            return False
        self.forced[replica] = -signum
        return True

    def poll_one(self, replica):
        st = self.started[replica]
        steps = self.script[self.attempt].get(replica, [RUNNING])
        return self.forced.get(replica, steps[min(max(st["polls"] - 1, 0), len(steps) - 1)])

    def stop(self, replicas, grace):
        self.calls.append(("stop", tuple(replicas)))
        for rid in replicas:
            if self.poll_one(rid) is None:
                self.forced[rid] = -signal.SIGTERM

    def read_log(self, replica):
        chunks = self.logs.get(replica) if self.attempt == 0 else None
        return chunks.pop(0) if chunks else b""

    def samples(self):
        return [(rid.name, 12.5, 1 << 20) for rid in self.started if rid not in self.forced]

    def close(self):
        self.calls.append(("close", self.attempt))


class Recorder(Observer):
    def __init__(self):
        self.lines, self.metrics, self.events, self.finished = [], [], [], None

    def on_line(self, replica, line):
        self.lines.append((replica, line))

    def on_metric(self, replica, metric, *, primary):
        self.metrics.append((replica, metric["kind"], primary))

    def on_event(self, reason, message, *, replica, warning):
        self.events.append(reason)

    def on_finish(self, state, message):
        self.finished = (state, message)


def make_job(tmp_path: Path, pools: str = "{worker: {replicas: 2}}", run_policy: str = "{backoff: 0.01}",
             **kw) -> tuple[Store, str]:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "prog.py").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: fake\nmodule: prog\npools: {pools}\nrun_policy: {run_policy}\n")
    store = Store(tmp_path / "home")
    return store, create_job(store, load_spec(spec), **kw)


class ScriptedBackend(Backend):
    """A backend whose replicas are a FakeGroup's script: ``Backend.run``'s template (journal, stop
    signals, the final state) around the real group controller."""

    name = "scripted"

    def __init__(self, group: ReplicaGroup):
        self.group = group

    def drive(self, record, options, journal) -> JobState:
        return GroupController(record, self.group, journal, poll_interval=0.001).run()

    def cancel(self, store, job, *, timeout=None):
        raise NotImplementedError


def drive(store, job_id, group, observer=None) -> JobState:
    return ScriptedBackend(group).run(store, job_id, observer)


def test_healthy_healthy_failed_restarts_the_group_then_succeeds(tmp_path):
    store, job_id = make_job(tmp_path, trainer_args=["--epochs", "1"])
    group = FakeGroup([
        {W0: [RUNNING], W1: [RUNNING, RUNNING, -signal.SIGKILL]},  # attempt 0: worker-1 killed
        {W0: [RUNNING, 0], W1: [0]},  # attempt 1: both finish
    ])
    obs = Recorder()
    assert drive(store, job_id, group, obs) is JobState.SUCCEEDED
    job = store.get_job(job_id)
    assert (job.state, job.restarts, job.backend) == ("Succeeded", 1, "local")
    assert [a["outcome"] for a in store.attempts(job_id)] == ["Restarting", "Succeeded"]
    # every attempt is placed anew and closed; the survivor of attempt 0 was stopped
    assert [c for c in group.calls if c[0] in ("place", "close")] == [("place", 0), ("close", 0), ("place", 1),
                                                                      ("close", 1)]
    assert ("stop", (W0, W1)) in group.calls
    reasons = [e["reason"] for e in store.events(job_id)]
    assert reasons.count("Started") == 4 and "Restarting" in reasons and reasons[-1] == "Succeeded"
    assert obs.finished[0] == "Succeeded" and "Restarting" in obs.events
    # each replica's environment names every replica's own host:port; the command gets the trainer args
    started = group.started[W1]
    assert json.loads(started["env"]["TF_CONFIG"])["cluster"] == {"worker": ["10.0.0.1:5000", "10.0.0.2:5001"]}
    assert started["env"]["MULTIWORKER_ATTEMPT"] == "1" and "PATH" not in started["env"]
    assert started["cmd"][-2:] == ["--epochs", "1"] and started["cwd"] == tmp_path
    assert started["log_path"] == Path(job.job_dir) / "attempt_1" / "worker-1.log"
    reps = {f"{r['role']}-{r['idx']}": r for r in store.replicas(job_id)}
    assert (reps["worker-1"]["host"], reps["worker-1"]["node"], reps["worker-1"]["port"]) == ("10.0.0.2", "node-1", 5001)
    assert {r["state"] for r in reps.values()} == {"Succeeded"}
    assert store.latest_samples(job_id)["worker-0"]["cpu_percent"] == 12.5


def test_backoff_limit_reached_fails_with_the_root_cause_first(tmp_path):
    store, job_id = make_job(tmp_path, run_policy="{backoff: 0.01, backoff_limit: 1}")
    fail = {W0: [RUNNING, 1], W1: [RUNNING, -signal.SIGKILL]}  # together: the kill is the likelier cause
    assert drive(store, job_id, FakeGroup([fail, fail])) is JobState.FAILED
    job = store.get_job(job_id)
    assert job.restarts == 1
    assert job.message.startswith("root cause: worker-1 (pid 102) failed with signal SIGKILL (exit code 137)")
    assert "also failed [worker-0]: exit code 1" in job.message
    assert [a["outcome"] for a in store.attempts(job_id)] == ["Restarting", "Failed"]


def test_deadline_stops_every_replica(tmp_path):
    store, job_id = make_job(tmp_path, run_policy="{active_deadline: 0.2s}")
    group = FakeGroup([{}])  # nobody ever exits
    assert drive(store, job_id, group) is JobState.FAILED
    assert "active_deadline of 0.2s exceeded" in store.get_job(job_id).message
    assert store.attempts(job_id)[0]["outcome"] == "DeadlineExceeded"
    assert ("stop", (W0, W1)) in group.calls
    assert {r["state"] for r in store.replicas(job_id)} == {"Stopped"}


def test_injected_failure_signals_through_the_group_and_restarts(tmp_path):
    store, job_id = make_job(tmp_path, inject_failures=["worker-1@0s:KILL", "worker-0@1h"])
    group = FakeGroup([{}, {W0: [0], W1: [0]}])
    assert drive(store, job_id, group) is JobState.SUCCEEDED
    assert [c for c in group.calls if c[0] == "signal"] == [("signal", W1, signal.SIGKILL)]  # once; 1h never came
    events = [(e["reason"], e["replica"], e["message"]) for e in store.events(job_id)]
    injected = [e for e in events if e[0] == "InjectedFailure"]
    assert len(injected) == 1 and injected[0][1] == "worker-1" and "sent SIGKILL" in injected[0][2]
    assert store.get_job(job_id).restarts == 1


def test_metric_lines_go_to_the_store_and_bad_ones_are_dropped_with_one_warning(tmp_path):
    epoch = b'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 1, "epochs": 2, "loss": 0.5}\n'
    logs = {W0: [b"hello\nMULTIWORKER_METRIC {not json\n", epoch[:20], epoch[20:] + b"MULTIWORKER_METRIC {\"kind\": \"nope\"}\n",
                 b'MULTIWORKER_METRIC {"kind": "progress", "epoch": 1, "epochs": 2, "step": 3, "steps": 10}\npart'],
            W1: [b'MULTIWORKER_METRIC {"kind": "final", "test_accuracy": 0.99}\n']}
    store, job_id = make_job(tmp_path)
    obs = Recorder()
    group = FakeGroup([{W0: [RUNNING] * 6 + [0], W1: [0]}], logs=logs)
    assert drive(store, job_id, group, obs) is JobState.SUCCEEDED
    assert [m["data"]["loss"] for m in store.metrics(job_id, "epoch")] == [0.5]
    assert store.metrics(job_id, "final")[0]["replica"] == "worker-1"
    assert store.progress(job_id)["worker-0"]["step"] == 3
    assert ("worker-0", "epoch", True) in obs.metrics and ("worker-1", "final", False) in obs.metrics
    lines = [line for _, line in obs.lines]
    assert lines == ["hello"]  # "part" waits for its end of line
    assert obs.events.count("BadMetricLine") == 1  # two bad lines of worker-0, one warning


def test_malformed_metric_values_never_end_the_job(tmp_path):
    """Each of these once failed the whole job (a ProgrammingError in the store) or crashed `status`."""
    bad = [b'MULTIWORKER_METRIC {"kind": "epoch", "epoch": [1]}\n',
           b'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 1, "images_per_sec": "fast"}\n',
           b'MULTIWORKER_METRIC {"kind": "progress", "epoch": 1, "step": "2"}\n',
           b'MULTIWORKER_METRIC {"kind": "epoch", "epoch": true}\n',
           *(b'MULTIWORKER_METRIC {"kind": "epoch", "%s": %d}\n' % (key.encode(), value)
             for key, value in (("epoch", 2**63), ("epochs", 2**64), ("step", 10**30), ("steps", 2**63)))]
    store, job_id = make_job(tmp_path)
    obs = Recorder()
    group = FakeGroup([{W0: [RUNNING] * 5 + [0], W1: [RUNNING] * 5 + [0]}], logs={W0: bad, W1: bad[::-1]})
    assert drive(store, job_id, group, obs) is JobState.SUCCEEDED
    assert store.metrics(job_id, "epoch") == [] and obs.events.count("BadMetricLine") == 2


def test_a_huge_integer_in_a_free_field_is_stored_but_never_drawn(tmp_path):
    from multiworker.metrics_line import metric_values

    line = b'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 1, "accuracy": 0.5, "big": %d}\n' % 10**400
    store, job_id = make_job(tmp_path)
    group = FakeGroup([{W0: [RUNNING] * 3 + [0], W1: [0]}], logs={W0: [line]})
    assert drive(store, job_id, group, Recorder()) is JobState.SUCCEEDED
    (row,) = store.metrics(job_id, "epoch")
    assert metric_values(row["data"]) == {"accuracy": 0.5}


def test_injection_at_an_epoch_fires_when_the_replica_reports_it(tmp_path):
    """`worker-1@epoch:1` fires only after worker-1's epoch-1 line, however long that takes."""
    epoch = b'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 1, "epochs": 3, "steps": 10}\n'
    store, job_id = make_job(tmp_path, inject_failures=["worker-1@epoch:1", "worker-0@step:25"])
    reads = []
    group = FakeGroup([{}, {W0: [0], W1: [0]}], logs={W1: [b"start\n"] + [b""] * 20 + [epoch]},
                      on_poll=lambda g: reads.append(len(g.logs[W1])))
    assert drive(store, job_id, group) is JobState.SUCCEEDED
    assert [c for c in group.calls if c[0] == "signal"] == [("signal", W1, signal.SIGKILL)]  # step 25 never came
    fired = [e for e in store.events(job_id) if e["reason"] == "InjectedFailure"]
    assert len(fired) == 1 and "worker-1@epoch:1" in fired[0]["message"]
    assert store.get_job(job_id).restarts == 1
    assert not group.logs[W1]  # the epoch line had been read before the kill
    never = [e["message"] for e in store.events(job_id) if e["reason"] == "InjectionNotFired"]
    assert never == ["worker-0@step:25:KILL: never fired, the job ended first"]


def test_never_policy_fails_at_once_and_ps_success_exit_is_not_success(tmp_path):
    store, job_id = make_job(tmp_path, pools="{chief: {}, worker: {replicas: 1}, ps: {}}",
                             run_policy="{restart_policy: Never}")
    group = FakeGroup([{PS0: [0], ReplicaId("worker", 0): [RUNNING, RUNNING, 3]}])
    assert drive(store, job_id, group) is JobState.FAILED
    assert store.get_job(job_id).restarts == 0
    assert "root cause: worker-0" in store.get_job(job_id).message


def test_ps_and_evaluator_exits_do_not_decide(tmp_path):
    """A ps or evaluator that exits 0 first leaves the decision to the chief (or every worker)."""
    store, job_id = make_job(tmp_path, pools="{chief: {}, ps: {}}")
    assert drive(store, job_id, FakeGroup([{PS0: [0], ReplicaId("chief", 0): [RUNNING, 0]}])) is JobState.SUCCEEDED
    store, job_id = make_job(tmp_path / "b", pools="{worker: {replicas: 1}, evaluator: {}}",
                             run_policy="{success_policy: all_workers}")
    group = FakeGroup([{ReplicaId("evaluator", 0): [0], W0: [RUNNING, 0]}])
    assert drive(store, job_id, group) is JobState.SUCCEEDED


def test_after_success_ps_stops_at_once(tmp_path):
    store, job_id = make_job(tmp_path, pools="{chief: {}, worker: {replicas: 1}, ps: {}}")
    group = FakeGroup([{ReplicaId("chief", 0): [RUNNING, 0]}])
    assert drive(store, job_id, group) is JobState.SUCCEEDED
    stopped = [c[1] for c in group.calls if c[0] == "stop"]
    assert set(stopped[0]) == {W0, PS0}  # workers serve forever under ParameterServerStrategy
    states = {f"{r['role']}-{r['idx']}": r["state"] for r in store.replicas(job_id)}
    assert states == {"chief-0": "Succeeded", "worker-0": "Stopped", "ps-0": "Stopped"}


def test_sigterm_to_the_driver_cancels(tmp_path):
    store, job_id = make_job(tmp_path)
    group = FakeGroup([{}], on_poll=lambda g: g.polls == 3 and os.kill(os.getpid(), signal.SIGTERM))
    previous = signal.getsignal(signal.SIGTERM)
    assert drive(store, job_id, group) is JobState.CANCELLED
    assert signal.getsignal(signal.SIGTERM) is previous  # restored
    assert JobState.CANCELLED.exit_code == 130
    assert store.get_job(job_id).message == "cancelled by SIGTERM; every replica stopped"


def test_a_job_no_longer_pending_is_not_run(tmp_path):
    store, job_id = make_job(tmp_path)
    store.update_job(job_id, state="Cancelled")
    group = FakeGroup([{}])
    assert drive(store, job_id, group) is JobState.CANCELLED and group.calls == []


class UnplaceableGroup(FakeGroup):
    """A FakeGroup whose ``place`` raises StartFailed in the attempts listed, and whose ``start`` raises
    it for one replica of one attempt (``start_fails``: (attempt, replica))."""

    def __init__(self, script, *, place_fails=(), start_fails=None, **kw):
        super().__init__(script, **kw)
        self.place_fails = place_fails
        self.start_fails = start_fails

    def place(self, replicas, attempt):
        placements = super().place(replicas, attempt)
        if attempt in self.place_fails:
            raise StartFailed("resources are busy")
        return placements

    def start(self, replica, cmd, cwd, env, log_path):
        if (self.attempt, replica) == self.start_fails:
            raise StartFailed(f"node of {replica} went away")
        return super().start(replica, cmd, cwd, env, log_path)


def test_placement_failing_on_a_restart_backs_off_places_again_and_succeeds(tmp_path):
    """A busy cluster on attempt 1 is one more failed attempt for the policy, not the end of the job."""
    store, job_id = make_job(tmp_path)
    group = UnplaceableGroup([{W1: [RUNNING, -signal.SIGKILL]}, {}, {W0: [RUNNING, 0], W1: [0]}], place_fails={1})
    obs = Recorder()
    assert drive(store, job_id, group, obs) is JobState.SUCCEEDED
    job = store.get_job(job_id)
    assert (job.state, job.restarts) == ("Succeeded", 2)
    assert [(a["n"], a["outcome"], a["finished_at"] is not None) for a in store.attempts(job_id)] == [
        (0, "Restarting", True), (1, "Restarting", True), (2, "Succeeded", True)]
    assert [c for c in group.calls if c[0] in ("place", "close")] == [
        ("place", 0), ("close", 0), ("place", 1), ("close", 1), ("place", 2), ("close", 2)]
    events = [(e["reason"], e["message"]) for e in store.events(job_id)]
    assert ("StartFailed", "could not start attempt 1: resources are busy") in events
    restarting = [m for r, m in events if r == "Restarting"]
    assert restarting[1] == "restart 2/3 of the whole group in 0.02s: could not start attempt 1: resources are busy"
    assert "StartFailed" in obs.events and obs.finished[0] == "Succeeded"
    assert {r["state"] for r in store.replicas(job_id)} == {"Succeeded"}


def test_a_group_that_never_places_fails_after_backoff_limit_restarts(tmp_path):
    store, job_id = make_job(tmp_path, run_policy="{backoff: 0.01, backoff_limit: 2}")
    group = UnplaceableGroup([{}], place_fails=range(10))
    state = drive(store, job_id, group)  # returns the final state: no UserError, no supervisor error
    assert state is JobState.FAILED and state.exit_code == 1
    job = store.get_job(job_id)
    assert job.restarts == 2 and [c for c in group.calls if c[0] == "place"] == [("place", n) for n in range(3)]
    assert job.message == "could not start attempt 2: resources are busy"
    assert [a["outcome"] for a in store.attempts(job_id)] == ["Restarting", "Restarting", "Failed"]
    assert [e["reason"] for e in store.events(job_id)].count("StartFailed") == 3
    assert store.replicas(job_id) == []  # nothing ever started


def test_restart_policy_never_fails_at_the_first_start_failure(tmp_path):
    store, job_id = make_job(tmp_path, run_policy="{restart_policy: Never}")
    assert drive(store, job_id, UnplaceableGroup([{}], place_fails={0})) is JobState.FAILED
    assert store.get_job(job_id).restarts == 0


def test_a_start_failure_stops_the_replicas_already_started(tmp_path):
    """worker-0 runs when worker-1's start fails: it is stopped (and recorded so), not left running."""
    store, job_id = make_job(tmp_path, run_policy="{backoff_limit: 0}")
    group = UnplaceableGroup([{}], start_fails=(0, W1))
    assert drive(store, job_id, group) is JobState.FAILED
    assert store.get_job(job_id).message == "could not start attempt 0: node of worker-1 went away"
    assert ("stop", (W0,)) in group.calls and group.forced == {W0: -signal.SIGTERM}
    assert [c for c in group.calls if c[0] == "close"] == [("close", 0)]
    reps = {f"{r['role']}-{r['idx']}": r for r in store.replicas(job_id)}
    assert list(reps) == ["worker-0"] and reps["worker-0"]["state"] == "Stopped"
    assert reps["worker-0"]["exit_code"] == 128 + signal.SIGTERM  # the controller's record, not the journal's sweep
    exited = [e for e in store.events(job_id) if e["reason"] == "ExitedWithCode"]
    assert [(e["replica"], e["message"]) for e in exited] == [("worker-0", "stopped by multiworker (pid 101)")]


def test_create_job_records_backend_and_options(tmp_path):
    store, job_id = make_job(tmp_path, inject_failures=["worker-1@5s"])
    job = store.get_job(job_id)
    assert job.backend == "local" and job.state is JobState.PENDING
    assert job.backend_options == {} and job.run.inject_failures == ("worker-1@5s:KILL",)
    assert (job.job_dir / "spec.json").is_file()
    with pytest.raises(UserError, match="--example: not an option of the local backend"):
        create_job(store, load_spec(tmp_path / "job.yaml"), backend_options={"example": 1})
    with pytest.raises(UserError, match="--backend 'nope': unknown backend; choose one of local"):
        create_job(store, load_spec(tmp_path / "job.yaml"), backend="nope")
    assert len(store.list_jobs()) == 1


def test_an_injection_after_the_last_epoch_says_so(tmp_path):
    last = b'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 2, "epochs": 2, "steps": 10}\n'
    store, job_id = make_job(tmp_path, inject_failures=["worker-1@epoch:2"])
    group = FakeGroup([{}, {W0: [0], W1: [0]}], logs={W0: [last]})
    assert drive(store, job_id, group) is JobState.SUCCEEDED
    (fired,) = [e["message"] for e in store.events(job_id) if e["reason"] == "InjectedFailure"]
    assert "the last epoch (2) had finished" in fired and "worker-1@step:5" in fired


class _Unplaceable(FakeGroup):
    def place(self, replicas, attempt):
        raise UserError("placement strict_spread puts each of the 2 replicas on its own node with 1 CPU: needs 2 "
                        "nodes, the cluster has 1")


def test_a_user_error_while_starting_ends_the_job_with_its_message_not_its_repr(tmp_path):
    store, job_id = make_job(tmp_path)
    obs = Recorder()
    with pytest.raises(UserError):
        drive(store, job_id, _Unplaceable([{}]), obs)
    message = store.get_job(job_id).message
    assert message.startswith("placement strict_spread puts") and "UserError" not in message
    assert obs.finished == ("Failed", message)


def test_run_prints_a_start_error_once(tmp_path, monkeypatch, capsys):
    """One error line on stderr, exit 2; the console does not say it again as the job's end."""
    import sys

    from multiworker import cli
    from multiworker.backends import base

    (tmp_path / "prog.py").write_text("")
    (tmp_path / "job.yaml").write_text("name: fake\nmodule: prog\npools: {worker: {replicas: 2}}\n")
    monkeypatch.setattr(base, "get_backend", lambda name: ScriptedBackend(_Unplaceable([{}])))
    monkeypatch.delenv("MULTIWORKER_DEBUG", raising=False)
    monkeypatch.setattr(sys, "argv", ["multiworker", "run", str(tmp_path / "job.yaml"), "-q"])
    with pytest.raises(SystemExit) as info:
        cli.main()
    out, err = capsys.readouterr()
    assert info.value.code == 2
    assert err.count("\n") == 1 and err.startswith("error: placement strict_spread") and "UserError" not in err, err
    assert "needs 2 nodes" not in out, out
