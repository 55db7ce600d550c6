"""The group controller: one job's restart loop over any :class:`ReplicaGroup` (local processes,
Ray actors...). Attempts, whole-group restarts through ``policy.decide`` after a growing back-off (a
group that cannot place or start an attempt, :class:`~multiworker.errors.StartFailed`, counts as a
failed attempt), the active deadline, fault injection (kills, stops, preemptions with their notice), hang detection
(:mod:`multiworker.hangs`: every replica's stacks saved, the laggard named, then a restart as after a
failure), live stack dumps on request, resource samples; everything it learns goes through the job's
journal (metric lines, events, the heartbeat, the stop signals, the end).

It runs in the launcher's process (foreground) or in the detached daemon; all it knows comes from
the job record, so any process can drive a recorded job.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
import time
from pathlib import Path

from multiworker.backends import stack_dumps
from multiworker.backends.base import Placement, ReplicaGroup
from multiworker.backends.failures import ReplicaFailure, summarize
from multiworker.cluster import ReplicaId, replica_env, replica_ids
from multiworker.errors import MultiworkerError, StartFailed
from multiworker.faults import Injection, Injector, parse_injection
from multiworker.hangs import HangWatch
from multiworker.job import JobRecord, JobState, Journal, ReplicaState
from multiworker.policy import (
    Decision,
    all_exited,
    backoff_delay,
    decide,
    decide_hang,
    decide_start_failure,
    exit_description,
    exit_order,
    normalize_exit_code,
    shutdown_plan,
)
from multiworker.progress import StepTracker, keras_progress

__all__ = ["GroupController"]

log = logging.getLogger(__name__)

_SAMPLE_EVERY = 1.0


@dataclasses.dataclass
class _Replica:
    """One running copy of a replica in the current attempt."""

    rid: ReplicaId
    placement: Placement
    log_path: Path
    pid: int | None = None
    returncode: int | None = None  # raw, once its exit is recorded
    stopped_by_us: bool = False

    @property
    def exit_code(self) -> int | None:
        return None if self.returncode is None else normalize_exit_code(self.returncode)


class GroupController:
    """Runs one recorded job to its end over ``group``, recording through ``journal``. ``run()``
    returns the final state."""

    def __init__(self, record: JobRecord, group: ReplicaGroup, journal: Journal, *, poll_interval: float = 0.1):
        self.job_id = record.id
        self.group = group
        self.journal = journal
        self.poll_interval = poll_interval
        self.spec = record.spec
        self.platform = record.format  # what a single replica's environment follows (cluster.SINGLE_REPLICA_ENV)
        self.base_dir = record.base_dir
        self.layout = record.layout
        self.output_dir = Path(record.output_dir)
        self.trainer_args: list[str] = list(record.run.trainer_args)
        counts = self.spec.replica_counts()
        self.injector = Injector([i for t in record.run.inject_failures for i in parse_injection(t).expand(counts)])
        self.steps = StepTracker()
        self.hangs = HangWatch(self.spec.run_policy.hang_timeout)
        journal.ingest.on_metric = self._on_metric
        journal.ingest.on_line = self._on_line
        self._kills: list[tuple[float, int, ReplicaId, float]] = []  # SIGKILL due after a preemption's notice
        self._interrupted: dict[int, tuple[str, float, int | None]] = {}  # attempt -> (by what, when, step then)
        self._resumed: dict[int, int] = {}  # interrupted attempt -> steps lost, once the next one resumed
        journal.on_repeated_stop = self._kill_now
        self.replicas: dict[ReplicaId, _Replica] = {}
        self.restarts = 0
        self.attempt = 0
        self._group_open = False
        self._killed_now = False  # a second stop signal SIGKILLed the replicas
        self._started = 0.0
        self._first_attempt_started = 0.0
        self._last_sample = 0.0

    @property
    def _stop_signal(self) -> int | None:
        return self.journal.stop_signal

    # -- public ------------------------------------------------------------------------
    def run(self) -> JobState:
        self._started = time.time()
        self.journal.set_state(JobState.RUNNING, started_at=self._started, heartbeat_at=self._started)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        try:
            return self._loop()
        except BaseException as exc:  # never leave replicas or a Running record behind
            self._stop_all()
            self._close_group()
            message = str(exc) if isinstance(exc, MultiworkerError) else f"supervisor error: {exc!r}"
            self._finish(JobState.FAILED, message, reason="Failed")
            raise

    # -- the restart loop ----------------------------------------------------------------
    def _loop(self) -> JobState:
        while True:
            try:
                self._start_group()
            except StartFailed as exc:
                outcome, detail = self._start_failed(exc)
            else:
                outcome, detail = self._watch()
            self._close_group()
            if outcome == "succeeded":
                self.journal.end_attempt(self.attempt, "Succeeded")
                return self._finish(JobState.SUCCEEDED, detail or "the job succeeded", reason="Succeeded")
            if outcome == "cancelled":
                self.journal.end_attempt(self.attempt, "Cancelled")
                return self._finish(JobState.CANCELLED, detail, reason="Cancelled", warning=True)
            if outcome == "deadline":
                self.journal.end_attempt(self.attempt, "DeadlineExceeded")
                return self._finish(JobState.FAILED, detail, reason="DeadlineExceeded", warning=True)
            if outcome == "failed":
                self.journal.end_attempt(self.attempt, "Failed")
                return self._finish(JobState.FAILED, detail, reason="Failed", warning=True)
            # restart the whole group after a growing back-off
            self.journal.end_attempt(self.attempt, "Restarting")
            delay = backoff_delay(self.spec, self.restarts)
            self.restarts += 1
            self.journal.set_state(JobState.RESTARTING, restarts=self.restarts)
            self._event("Restarting", f"restart {self.restarts}/{self.spec.run_policy.backoff_limit} of the whole group "
                        f"in {delay:g}s: {detail.splitlines()[0]}", warning=True)
            if self.journal.sleep(delay):
                return self._finish(JobState.CANCELLED, self._cancel_message(), reason="Cancelled", warning=True)
            self.attempt += 1

    def _command(self, rid: ReplicaId) -> tuple[list[str], Path]:
        own = self.group.program(rid, self.trainer_args)
        if own is not None:
            return own
        program = self.spec.resolved(rid.role)
        if program.module:
            cmd = [program.python or sys.executable, "-m", program.module]
        else:
            cmd = list(program.command or [])
        return cmd + list(program.args or []) + self.trainer_args, self.base_dir / (program.working_dir or ".")

    def _start_failed(self, exc: StartFailed) -> tuple[str, str]:
        """An attempt that could not place or start its replicas: a failed attempt for the policy."""
        self.replicas = {rid: rep for rid, rep in self.replicas.items() if rep.pid is not None}
        self._stop_all()
        detail = f"could not start attempt {self.attempt}: {exc}"
        self._event("StartFailed", detail, warning=True)
        if self._stop_signal is not None:
            return "cancelled", self._cancel_message()
        decision = decide_start_failure(self.spec, self.restarts)
        return ("restart" if decision is Decision.RESTART else "failed"), detail

    def _start_group(self) -> None:
        ids = replica_ids(self.spec)
        self.journal.start_attempt(self.attempt)
        if self.attempt == 0:
            self._first_attempt_started = time.time()
        self.replicas = {}
        self._group_open = True
        placements = self.group.place(ids, self.attempt)
        addresses = {rid: placements[rid].address for rid in ids}
        for rid in ids:
            placement = placements[rid]
            env = replica_env(self.spec, rid, addresses, job_id=self.job_id, attempt=self.attempt,
                              output_dir=str(self.output_dir), platform=self.platform)
            if self.spec.run_policy.hang_timeout:  # multiworker.trainer keeps TF's heartbeat past it
                env["MULTIWORKER_HANG_TIMEOUT"] = f"{self.spec.run_policy.hang_timeout:g}"
            cmd, cwd = self._command(rid)
            rep = self.replicas[rid] = _Replica(rid, placement, self.layout.replica_log(self.attempt, rid.name))
            rep.pid = self.group.start(rid, cmd, cwd, env, rep.log_path)
            self.journal.replica(rid, ReplicaState.RUNNING, pid=rep.pid, port=placement.port, host=placement.host,
                                 node=placement.node, exit_code=None, attempt=self.attempt, started_at=time.time(),
                                 finished_at=None, log_path=str(rep.log_path))
            where = f"port {placement.port}" if placement.host == "127.0.0.1" else f"on {placement.address}"
            self._event("Started", f"pid {rep.pid}, {where}, attempt {self.attempt}: {' '.join(cmd)}",
                        replica=rid.name)
        self.journal.set_state(JobState.RUNNING)
        self.steps.new_attempt(self.attempt)
        self.hangs.new_attempt(time.monotonic())

    def _close_group(self) -> None:
        if self._group_open:
            self._group_open = False
            self.group.close()

    def _newly_exited(self) -> dict[ReplicaId, int]:
        """Raw exit codes of the replicas that exited since their exit was last recorded."""
        return {rid: code for rid, code in self.group.poll().items()
                if code is not None and rid in self.replicas and self.replicas[rid].returncode is None}

    def _watch(self) -> tuple[str, str]:
        """Watch the group until it succeeds, must restart, fails, is cancelled or hits its deadline."""
        exits: dict[ReplicaId, int] = {}
        deadline = self.spec.run_policy.active_deadline
        while True:
            self._pump_logs()
            self._tick()
            if self._stop_signal is not None:
                self._stop_all()
                return "cancelled", self._cancel_message()
            if deadline is not None and time.time() - self._started > deadline:
                self._stop_all()
                return "deadline", f"active_deadline of {deadline:g}s exceeded; stopped every replica"
            newly = self._newly_exited()
            if newly:
                self._drain_logs()  # every line a replica printed before it exited counts (final metrics)
            for rid in exit_order(newly):
                rep = self.replicas[rid]
                rep.returncode = newly[rid]
                code = exits[rid] = normalize_exit_code(newly[rid])
                self._record_exit(rep)
                decision = decide(self.spec, rid, code, exits, self.restarts)
                if decision is Decision.SUCCEED:
                    self._finish_success()
                    return "succeeded", f"{rid} succeeded"
                if decision in (Decision.RESTART, Decision.FAIL):
                    self._stop_all()
                    self._drain_logs()
                    summary = self._failure_summary(rep)
                    return ("restart" if decision is Decision.RESTART else "failed"), summary
            if all_exited(self.replicas, exits):
                return "failed", "every replica exited without the success policy being met"
            quiet = self.hangs.hung(time.monotonic())
            if quiet is not None:
                return self._hung(quiet)
            time.sleep(self.poll_interval)

    def _hung(self, quiet: float) -> tuple[str, str]:
        """No replica advanced for the hang timeout: save every replica's stacks, name the laggard,
        record ``Hung``, stop the group (the laggard first, so its peers' collectives fail and the
        chief can back up the step it reached) and decide as after a failure."""
        limit = self.hangs.timeout or 0.0
        source = "run_policy.hang_timeout" if self.spec.run_policy.hang_timeout else "derived from the job's pace"
        why = f"no replica advanced for {quiet:.1f}s (hang timeout {limit:g}s, {source})"
        running = [rid for rid, rep in self.replicas.items() if rep.returncode is None]
        dump = stack_dumps.take(self.group, running, self.layout, self.attempt, time.strftime("%Y%m%d-%H%M%S-hung"),
                                why, {rid.name: self.steps.step_of(rid.name) for rid in running})
        laggard = (f"laggard {dump.laggard[0]}: {dump.laggard[1]}" if dump.laggard
                   else "no laggard stands out (every replica waits alike)")
        missing = [f"{d.replica}: {d.error}" for d in dump.dumps.values() if not d.text]
        saved = f"stacks of {len(dump.dumps) - len(missing)}/{len(dump.dumps)} replicas in {dump.folder}"
        self._event("Hung", f"{why}; {laggard}; {saved}" + (f" ({'; '.join(missing)})" if missing else ""),
                    replica=dump.laggard[0] if dump.laggard else None, warning=True)
        self._interrupted[self.attempt] = ("a hang", time.time(), self.steps.reached.get(self.attempt))
        if dump.laggard:
            self._kill_first(ReplicaId.parse(dump.laggard[0]))
        self._stop_all()
        self._drain_logs()
        decision = decide_hang(self.spec, self.restarts)
        return ("restart" if decision is Decision.RESTART else "failed"), f"hung: {why}; {laggard}"

    def _finish_success(self) -> None:
        """After success: stop ps at once; give workers a grace period and the evaluator its timeout."""
        plan = shutdown_plan(self.spec, [rid for rid, rep in self.replicas.items() if rep.returncode is None])
        start = time.monotonic()
        while plan:
            self._pump_logs()
            self._tick()
            for rid, code in self._newly_exited().items():
                self.replicas[rid].returncode = code
                self._record_exit(self.replicas[rid])
            plan = {rid: wait for rid, wait in plan.items() if self.replicas[rid].returncode is None}
            overdue = [rid for rid, wait in plan.items() if time.monotonic() - start >= wait]
            if overdue:
                self._stop(overdue)
            if not plan or len(overdue) == len(plan):
                break
            if self._stop_signal is not None:
                self._stop_all()
                break
            time.sleep(self.poll_interval)
        self._drain_logs()

    # -- helpers -----------------------------------------------------------------------------
    def _record_exit(self, rep: _Replica) -> None:
        code = rep.exit_code
        if rep.stopped_by_us:
            state = ReplicaState.STOPPED
        else:
            state = ReplicaState.SUCCEEDED if code == 0 else ReplicaState.FAILED
        self.journal.replica(rep.rid, state, exit_code=code, finished_at=time.time())
        message = "stopped by multiworker" if rep.stopped_by_us else exit_description(rep.returncode or 0)
        self._event("ExitedWithCode", f"{message} (pid {rep.pid})", replica=rep.rid.name,
                    warning=state is ReplicaState.FAILED)

    def _stop(self, rids: list[ReplicaId]) -> None:
        """Stop these replicas (grace period, then SIGKILL) and record how each ended."""
        before = self.group.poll()
        for rid in rids:
            if before.get(rid) is None:
                self.replicas[rid].stopped_by_us = True
        grace = self.spec.run_policy.grace_period
        self.group.stop(rids, grace)
        after = self.group.poll()
        for rid in rids:
            rep = self.replicas[rid]
            if rep.returncode is None:
                code = after.get(rid)
                rep.returncode = -signal.SIGKILL if code is None else code
                if rep.stopped_by_us and code == -signal.SIGKILL and grace > 0 and not self._killed_now:
                    self._event("GracePeriodExceeded", f"still running {grace:g}s (grace_period) after SIGTERM: "
                                "SIGKILLed. A TensorFlow MultiWorkerMirroredStrategy replica ignores SIGTERM "
                                "unless its trainer builds the strategy with multiworker.trainer.strategy()",
                                replica=rid.name, warning=True)
                self._record_exit(rep)

    def _stop_all(self) -> None:
        if self.replicas:
            self._stop(list(self.replicas))

    def _failure_summary(self, root: _Replica) -> str:
        failed = [r for r in self.replicas.values() if r is not root and r.exit_code and not r.stopped_by_us]

        def as_failure(r: _Replica) -> ReplicaFailure:
            assert r.returncode is not None  # only replicas whose exit is recorded are summarized
            return ReplicaFailure(r.rid.name, r.pid, r.returncode, r.log_path)

        return summarize(as_failure(root), [as_failure(r) for r in failed])

    def _tick(self) -> None:
        """Periodic work: fault injection, resource samples, progress and the heartbeat."""
        now = time.time()
        for inj in self.injector.due(now - self._first_attempt_started):
            rep = self.replicas.get(inj.replica)
            if rep is None or rep.returncode is not None or not self.group.signal(inj.replica, inj.signal):
                self._event("InjectedFailure", f"{inj}: {inj.replica} was not running; nothing killed",
                            replica=inj.replica.name, warning=True)
                continue
            late = f"; {self.injector.advice(inj)}" if self.injector.training_done() else ""
            if inj.notice is not None:
                self._preempted(inj, rep, late)
                continue
            self._event("InjectedFailure", f"{inj}: sent {inj.signal_name} to {inj.replica} (pid {rep.pid}) "
                        f"{now - self._first_attempt_started:.1f}s after the first attempt started{late}",
                        replica=inj.replica.name, warning=True)
        self._kill_after_notice()
        self._report_resumed()
        if now - self._last_sample >= _SAMPLE_EVERY:
            self._last_sample = now
            self.journal.samples(self.group.samples())
            self.journal.tick()
            request = stack_dumps.read_request(self.layout)
            if request is not None:
                self._dump_on_request(request)

    # -- preemption, resumption, stacks on request ------------------------------------------------
    def _kill_first(self, rid: ReplicaId, wait: float = 5.0) -> None:
        """SIGKILL one replica and record its exit (within ``wait`` seconds) before the rest are stopped."""
        rep = self.replicas[rid]
        rep.stopped_by_us = True
        if not self.group.signal(rid, signal.SIGKILL):
            return
        end = time.monotonic() + wait
        while time.monotonic() < end:
            code = self._newly_exited().get(rid)
            if code is not None:
                rep.returncode = code
                self._record_exit(rep)
                return
            time.sleep(self.poll_interval)

    def _preempted(self, inj: Injection, rep: _Replica, late: str = "") -> None:
        """SIGTERM sent (by ``_tick``): the SIGKILL follows when the notice is over."""
        assert inj.notice is not None
        step = self.steps.reached.get(self.attempt)
        self._kills.append((time.monotonic() + inj.notice, self.attempt, inj.replica, inj.notice))
        self._interrupted.setdefault(self.attempt, (f"preemption ({inj})", time.time(), step))
        at = f"at step {step}" if step is not None else "before any step was reported"
        self._event("Preempted", f"{inj}: SIGTERM to {inj.replica} (pid {rep.pid}) {at}; SIGKILL in "
                    f"{inj.notice:g}s unless it has exited{late}", replica=inj.replica.name, warning=True)

    def _kill_after_notice(self) -> None:
        now = time.monotonic()
        for due in [k for k in self._kills if k[0] <= now]:
            self._kills.remove(due)
            _, attempt, rid, notice = due
            rep = self.replicas.get(rid)
            if attempt == self.attempt and rep is not None and rep.returncode is None and self.group.signal(rid, signal.SIGKILL):
                self._event("PreemptionKill", f"the {notice:g}s notice is over: SIGKILL to {rid} (pid {rep.pid})",
                            replica=rid.name, warning=True)

    def _report_resumed(self) -> None:
        """Once an attempt after a hang or a preemption reports where it resumed: the steps lost."""
        for attempt, (what, when, at_signal) in self._interrupted.items():
            if attempt in self._resumed or attempt + 1 not in self.steps.resumed:
                continue
            resumed = self.steps.resumed[attempt + 1]
            reached = self.steps.reached.get(attempt, 0)
            lost = max(0, (at_signal if at_signal is not None else reached) - resumed)
            self._resumed[attempt] = lost
            redone = max(0, reached - resumed)
            self._event("Resumed", f"training again {time.time() - when:.1f}s after {what} in attempt {attempt}: "
                        f"step {at_signal if at_signal is not None else '?'} at the interruption, {reached} reached "
                        f"in that attempt; resumed from step {resumed}: {lost} steps lost"
                        + (f" ({redone} redone)" if redone != lost else ""), warning=lost > 0)

    def _dump_on_request(self, name: str) -> None:
        running = [rid for rid, rep in self.replicas.items() if rep.returncode is None]
        dump = stack_dumps.take(self.group, running, self.layout, self.attempt, name, "asked by multiworker stacks",
                                {rid.name: self.steps.step_of(rid.name) for rid in running})
        self._event("StacksDumped", f"stacks of {len(running)} replicas in {dump.folder}")

    def _on_metric(self, replica: str, metric: dict) -> None:
        self.injector.observe(replica, metric)
        self.steps.observe_metric(replica, metric)
        if metric.get("kind") in ("progress", "epoch"):
            self.hangs.step(time.monotonic())

    def _on_line(self, replica: str, line: str) -> None:
        self.injector.observe_line(replica, line)
        self.steps.observe_line(replica, line)
        parsed = keras_progress(line)
        if parsed is not None and parsed[0] == "bar":
            self.hangs.step(time.monotonic())

    def _pump_logs(self) -> int:
        """Feed each replica's new output (one chunk each) to the ingest; return the bytes read."""
        total = 0
        for rid in self.replicas:
            data = self.group.read_log(rid)
            total += len(data)
            self.journal.feed(rid.name, data)
        if total:
            self.hangs.activity(time.monotonic())
        return total

    def _drain_logs(self, limit: float = 10.0) -> None:
        """Read every log to its end (bounded in time: a replica still printing cannot stall the job)."""
        end = time.monotonic() + limit
        while self._pump_logs() and time.monotonic() < end:
            pass

    def _finish(self, state: JobState, message: str, *, reason: str, warning: bool = False) -> JobState:
        self._report_resumed()
        for inj in self.injector.pending:
            self._event("InjectionNotFired", f"{inj}: never fired, the job ended first", replica=inj.replica.name,
                        warning=True)
        if self._resumed:
            message += (f"; {len(self._resumed)} interruption(s) (hang or preemption): "
                        f"{sum(self._resumed.values())} steps lost")
        return self.journal.finish(state, message, reason=reason, warning=warning, restarts=self.restarts)

    def _event(self, reason: str, message: str, *, replica: str | None = None, warning: bool = False) -> None:
        self.journal.event(reason, message, replica=replica, warning=warning)

    def _cancel_message(self) -> str:
        return f"cancelled by {self.journal.stop_name}; every replica stopped"

    def _kill_now(self) -> None:
        """SIGKILL every replica that still runs, at once (called from a signal handler)."""
        self.journal.obs.on_event("Killing", "second stop signal: SIGKILL to every replica now", replica=None,
                                  warning=True)
        self._killed_now = True
        for rid, rep in list(self.replicas.items()):
            if rep.returncode is None:
                try:
                    self.group.signal(rid, signal.SIGKILL)
                except Exception:  # noqa: BLE001 - best effort inside a signal handler
                    log.debug("SIGKILL to %s failed", rid, exc_info=True)
