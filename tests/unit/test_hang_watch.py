"""Hang detection, stacks, step tracking and the STOP / CONT / PREEMPT injections: the pure parts
table-tested, the controller driven by a fake group, py-spy against a real stopped process."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from test_controller import RUNNING, W0, W1, FakeGroup, drive, make_job

from multiworker.cluster import ReplicaId
from multiworker.errors import UserError
from multiworker.faults import Injector, check_injections, parse_injection
from multiworker.hangs import DERIVED_FLOOR, HangWatch
from multiworker.job import JobState
from multiworker.progress import StepTracker
from multiworker.spec.model import JobSpec
from multiworker.stacks import Dump, dump, main_thread, pick_laggard, process_state


# -- the hang timeout ----------------------------------------------------------------------------
def test_configured_timeout_counts_once_training_reports_steps():
    watch = HangWatch(20.0)
    watch.new_attempt(0.0)
    assert watch.timeout == DERIVED_FLOOR and watch.hung(100.0) is None  # startup: at least the floor
    watch.step(100.0)
    assert watch.timeout == 20.0 and watch.hung(119.0) is None and watch.hung(120.5) == pytest.approx(20.5)
    watch.activity(120.6)  # any output counts as advancing
    assert watch.hung(130.0) is None


def test_derived_timeout_follows_the_longest_quiet_stretch():
    watch = HangWatch(None)
    watch.new_attempt(0.0)
    watch.activity(50.0)
    assert watch.timeout is None and watch.hung(10_000.0) is None  # no step yet: never hung
    watch.step(60.0)
    watch.step(70.0)  # a 10 s stretch while training
    assert watch.timeout == max(DERIVED_FLOOR, 20 * 10.0)
    assert watch.hung(70.0 + 199) is None and watch.hung(70.0 + 201) is not None


def test_zero_turns_hang_detection_off():
    watch = HangWatch(0.0)
    watch.new_attempt(0.0)
    watch.step(1.0)
    assert watch.timeout is None and watch.hung(1e9) is None


# -- steps from output -----------------------------------------------------------------------------
def test_steps_from_keras_progress_bar_and_resume_point():
    steps = StepTracker()
    for line in ["Epoch 1/2", " 10/100 [==>......]", "100/100 [==========]", "Epoch 2/2", " 30/100 [===>....]"]:
        steps.observe_line("worker-0", line)
    assert steps.reached[0] == 130 and steps.resumed[0] == 9
    steps.new_attempt(1)
    steps.observe_line("worker-0", "Epoch 2/2")
    steps.observe_line("worker-0", " 26/100 [==>......]")  # BackupAndRestore resumed after step 25 of epoch 2
    assert steps.lost(0) == (130, 125)


def test_steps_from_trainer_lines_and_metric_lines():
    steps = StepTracker()
    steps.observe_metric("worker-0", {"kind": "progress", "epoch": 1, "step": 40, "steps": 60})
    steps.observe_line("worker-0", "INFO multiworker.trainer._peer_loss: a peer was lost: backed up epoch 1, step 47 ")
    steps.new_attempt(1)
    steps.observe_line("worker-0", "INFO x: resuming from the backup taken at epoch 1, step 47")
    steps.observe_metric("worker-0", {"kind": "progress", "epoch": 1, "step": 55, "steps": 60})
    assert steps.lost(0) == (47, 47) and steps.step_of("worker-1") == 55  # a silent replica follows the job


# -- injections ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text,action,notice", [
    ("worker-1@step:200:STOP", "STOP", None),
    ("worker-1@60s:CONT", "CONT", None),
    ("worker-1@step:200:PREEMPT=30s", "PREEMPT=30s", 30.0),
    ("worker-0@5s:preempt", "PREEMPT=30s", 30.0),
    ("worker-*@epoch:1:PREEMPT=10s", "PREEMPT=10s", 10.0),
])
def test_stop_cont_and_preempt_parse(text, action, notice):
    inj = parse_injection(text)
    assert inj.action == action and inj.notice == notice and str(parse_injection(str(inj))) == str(inj)


def test_role_wildcard_expands_to_every_replica_and_must_exist():
    inj = parse_injection("worker-*@step:10:PREEMPT=5s")
    assert [i.replica for i in inj.expand({"worker": 3})] == [ReplicaId("worker", i) for i in range(3)]
    spec = JobSpec.model_validate({"name": "j", "module": "m", "pools": {"worker": {"replicas": 2}}})
    with pytest.raises(UserError, match="no ps replicas"):
        check_injections(spec, [parse_injection("ps-*@1s")])


def test_cont_waits_for_the_stop_of_its_replica():
    injector = Injector([parse_injection("worker-1@0s:CONT"), parse_injection("worker-1@epoch:1:STOP")])
    assert injector.due(5.0) == []  # due by time, but its STOP has not fired
    injector.observe_line("worker-1", "Epoch 2/3")  # Keras began epoch 2: epoch 1 is done
    assert [i.action for i in injector.due(5.0)] == ["STOP"]
    assert [i.action for i in injector.due(5.0)] == ["CONT"]


# -- the laggard ---------------------------------------------------------------------------------
_WAITING = 'Thread 1 (idle): "MainThread"\n    quick_execute (tensorflow/python/eager/execute.py:53)\n    fit (t.py:3)\n'
_IN_USER_CODE = 'Thread 2 (active): "MainThread"\n    load (data.py:12)\n    fit (t.py:3)\n'


def test_laggard_is_the_stopped_one_then_the_one_outside_the_framework():
    stopped = {"worker-0": Dump("worker-0", 1, "sleeping", _WAITING), "worker-1": Dump("worker-1", 2, "stopped", _WAITING)}
    assert pick_laggard(stopped)[0] == "worker-1"
    outside = {"worker-0": Dump("worker-0", 1, "sleeping", _WAITING), "worker-1": Dump("worker-1", 2, "running", _IN_USER_CODE)}
    name, why = pick_laggard(outside)
    assert name == "worker-1" and "load (data.py:12)" in why
    alike = {"worker-0": Dump("worker-0", 1, "sleeping", _WAITING), "worker-1": Dump("worker-1", 2, "sleeping", _WAITING)}
    assert pick_laggard(alike) is None
    assert main_thread(_IN_USER_CODE)[0] == ("load", "data.py:12")


def test_py_spy_reads_a_stopped_process():
    """py-spy cannot pause a stopped process: it is read without pausing, every thread included."""
    child = subprocess.Popen([sys.executable, "-c", "import threading, time\n"
                              "def waiter():\n    time.sleep(600)\n"
                              "threading.Thread(target=waiter, name='waiter').start()\n"
                              "print('ready', flush=True)\ntime.sleep(600)\n"], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGSTOP)
        deadline = time.monotonic() + 30
        while process_state(child.pid) != "stopped" and time.monotonic() < deadline:
            time.sleep(0.05)
        got = dump("worker-1", child.pid)
        assert got.error is None, got.error
        assert got.state == "stopped" and '"MainThread"' in got.text and '"waiter"' in got.text
        assert main_thread(got.text)[0][0] == "<module>"
    finally:
        child.kill()
        child.wait()


# -- the controller --------------------------------------------------------------------------------
class StackGroup(FakeGroup):
    """A fake group whose replicas can be dumped: worker-1 is stopped."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.dumped: list[ReplicaId] = []

    def dump_stacks(self, replica):
        self.dumped.append(replica)
        state = "stopped" if replica == W1 else "sleeping"
        return Dump(replica.name, 100, state, _WAITING)


def test_a_quiet_group_is_hung_dumped_and_restarted(tmp_path):
    store, job_id = make_job(tmp_path, run_policy="{backoff: 0.01, hang_timeout: 0.2}")
    logs = {W0: [b'MULTIWORKER_METRIC {"kind": "progress", "epoch": 1, "epochs": 1, "step": 5, "steps": 10}\n']}
    group = StackGroup([{}, {W0: [RUNNING, 0], W1: [0]}], logs=logs)
    assert drive(store, job_id, group) is JobState.SUCCEEDED
    assert sorted(group.dumped) == [W0, W1]
    (hung,) = [e for e in store.events(job_id) if e["reason"] == "Hung"]
    assert hung["replica"] == "worker-1" and "laggard worker-1" in hung["message"]
    assert ("signal", W1, signal.SIGKILL) in group.calls  # the laggard first
    folder = store.get_job(job_id).layout.stacks_dir(0)
    (dumped,) = list(folder.iterdir())
    assert sorted(p.name for p in dumped.iterdir()) == ["index.txt", "worker-0.txt", "worker-1.txt"]
    assert store.get_job(job_id).restarts == 1


def test_hang_with_restart_policy_never_fails(tmp_path):
    store, job_id = make_job(tmp_path, run_policy="{restart_policy: Never, hang_timeout: 0.2}")
    logs = {W0: [b'MULTIWORKER_METRIC {"kind": "progress", "epoch": 1, "epochs": 1, "step": 5, "steps": 10}\n']}
    assert drive(store, job_id, StackGroup([{}], logs=logs)) is JobState.FAILED
    assert "hung: no replica advanced" in store.get_job(job_id).message


def test_preemption_sends_term_then_kill_after_the_notice_and_reports_steps_lost(tmp_path):
    progress = b'MULTIWORKER_METRIC {"kind": "progress", "epoch": 1, "epochs": 1, "step": %d, "steps": 100}\n'

    class Group(StackGroup):
        def signal(self, replica, signum):  # the replica ignores SIGTERM, as TensorFlow's handler does
            self.calls.append(("signal", replica, signum))
            if signum == signal.SIGTERM:
                return replica in self.started
            return super().signal(replica, signum)

        def read_log(self, replica):
            if self.attempt == 1 and replica == W0 and not getattr(self, "resumed_sent", False):
                self.resumed_sent = True
                return b"resuming from the backup taken at epoch 1, step 20\n" + progress % 30
            return super().read_log(replica)

    store, job_id = make_job(tmp_path, inject_failures=["worker-1@step:25:PREEMPT=0.2s"])
    group = Group([{}, {W0: [RUNNING] * 50 + [0], W1: [0]}], logs={W0: [progress % 10, progress % 26]})
    assert drive(store, job_id, group) is JobState.SUCCEEDED
    sent = [c[2] for c in group.calls if c[0] == "signal" and c[1] == W1]
    assert sent[:2] == [signal.SIGTERM, signal.SIGKILL]
    reasons = [e["reason"] for e in store.events(job_id)]
    assert reasons.index("Preempted") < reasons.index("PreemptionKill") < reasons.index("Resumed")
    (resumed,) = [e["message"] for e in store.events(job_id) if e["reason"] == "Resumed"]
    assert "step 26 at the interruption" in resumed and "resumed from step 20: 6 steps lost" in resumed
    assert store.get_job(job_id).message.endswith("1 interruption(s) (hang or preemption): 6 steps lost")
