"""The local supervisor: spawn every replica with its cluster environment, watch exits, logs,
metrics and resources, and restart the whole group or end the job as the policy decides.

It runs in the launcher's process (foreground) or in a detached process (``--detach``); all it
knows comes from the job record, and all it learns goes back to the store.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from multiworker.backends.local import procs
from multiworker.backends.local.failures import ReplicaFailure, summarize
from multiworker.backends.local.observer import NullObserver, Observer
from multiworker.backends.local.watchdog import start_watchdog
from multiworker.cluster import ReplicaId, primary_replica, replica_env, replica_ids
from multiworker.faults import Injection, parse_injection
from multiworker.metrics_line import parse_metric
from multiworker.policy import Decision, backoff_delay, decide, exit_description, normalize_exit_code
from multiworker.spec.model import JobSpec
from multiworker.store import Store

__all__ = ["Supervisor", "EXIT_CODES"]

log = logging.getLogger(__name__)

EXIT_CODES = {"Succeeded": 0, "Failed": 1, "Lost": 1, "Cancelled": 130}
_POLL = 0.1
_SAMPLE_EVERY = 1.0
_INHERITED_CLUSTER_VARS = ("TF_CONFIG", "CLUSTER_SPEC")


class _Replica:
    """One running copy of a replica in the current attempt."""

    def __init__(self, rid: ReplicaId, proc: subprocess.Popen, log_path: Path):
        self.rid = rid
        self.proc = proc
        self.log_path = log_path
        self.offset = 0
        self.partial = b""
        self.exit_code: int | None = None  # normalized, once exited
        self.stopped_by_us = False
        self.psutil_proc = None


class Supervisor:
    """Runs one job to its end. ``run()`` returns the final job state."""

    def __init__(self, store: Store, job_id: str, observer: Observer | None = None):
        self.store = store
        self.job_id = job_id
        self.obs = observer or NullObserver()
        job = store.get_job(job_id)
        self.spec = JobSpec.model_validate_json(job["spec_json"])
        self.base_dir = Path(job["base_dir"])
        self.job_dir = Path(job["job_dir"])
        self.output_dir = Path(job["output_dir"])
        options = json.loads(job["options_json"] or "{}")
        self.trainer_args: list[str] = options.get("trainer_args", [])
        self.injections: list[Injection] = [parse_injection(t) for t in options.get("inject_failures", [])]
        self.replicas: dict[ReplicaId, _Replica] = {}
        self.restarts = 0
        self.attempt = 0
        self._stop_signal: int | None = None
        self._started = 0.0
        self._first_attempt_started = 0.0
        self._last_sample = 0.0
        self._fired: set[Injection] = set()
        self._progress: dict[str, dict] = {}  # latest progress line per replica, stored once a second

    # -- public ------------------------------------------------------------------------
    def run(self) -> str:
        state = self.store.get_job(self.job_id)["state"]
        if state != "Pending":  # e.g. cancelled before its supervisor started
            return state
        self._install_signal_handlers()
        self._started = time.time()
        self.store.update_job(self.job_id, state="Running", started_at=self._started, supervisor_pid=os.getpid(),
                              heartbeat_at=self._started)
        self.output_dir.mkdir(parents=True, exist_ok=True)
        watchdog = start_watchdog(self.job_id)
        try:
            state = self._loop()
        except BaseException as exc:  # never leave replicas or a Running record behind
            self._stop_all(reason="supervisor error")
            self._finish("Failed", f"supervisor error: {exc!r}", reason="Failed")
            raise
        finally:
            watchdog.kill()
            watchdog.wait()
        return state

    # -- the restart loop ----------------------------------------------------------------
    def _loop(self) -> str:
        while True:
            self._start_group()
            outcome, detail = self._watch()
            if outcome == "succeeded":
                self.store.end_attempt(self.job_id, self.attempt, "Succeeded")
                return self._finish("Succeeded", detail or "the job succeeded", reason="Succeeded")
            if outcome == "cancelled":
                self.store.end_attempt(self.job_id, self.attempt, "Cancelled")
                return self._finish("Cancelled", detail, reason="Cancelled", warning=True)
            if outcome == "deadline":
                self.store.end_attempt(self.job_id, self.attempt, "DeadlineExceeded")
                return self._finish("Failed", detail, reason="DeadlineExceeded", warning=True)
            if outcome == "failed":
                self.store.end_attempt(self.job_id, self.attempt, "Failed")
                return self._finish("Failed", detail, reason="Failed", warning=True)
            # restart the whole group after a growing back-off
            self.store.end_attempt(self.job_id, self.attempt, "Restarting")
            delay = backoff_delay(self.spec, self.restarts)
            self.restarts += 1
            self.store.update_job(self.job_id, state="Restarting", restarts=self.restarts)
            self._event("Restarting", f"restart {self.restarts}/{self.spec.run_policy.backoff_limit} of the whole group "
                        f"in {delay:g}s: {detail.splitlines()[0]}", warning=True)
            if self._sleep(delay):
                return self._finish("Cancelled", self._cancel_message(), reason="Cancelled", warning=True)
            self.attempt += 1

    def _start_group(self) -> None:
        ids = replica_ids(self.spec)
        ports = dict(zip(ids, procs.free_ports(len(ids))))
        attempt_dir = self.job_dir / f"attempt_{self.attempt}"
        attempt_dir.mkdir(parents=True, exist_ok=True)
        self.store.start_attempt(self.job_id, self.attempt)
        if self.attempt == 0:
            self._first_attempt_started = time.time()
        base_env = {k: v for k, v in os.environ.items() if k not in _INHERITED_CLUSTER_VARS}
        self.replicas = {}
        for rid in ids:
            program = self.spec.resolved(rid.role)
            env = {**base_env, **replica_env(self.spec, rid, ports, job_id=self.job_id, attempt=self.attempt,
                                              output_dir=str(self.output_dir))}
            if program.module:
                cmd = [program.python or sys.executable, "-m", program.module]
            else:
                cmd = list(program.command or [])
            cmd += list(program.args or []) + self.trainer_args
            log_path = attempt_dir / f"{rid.name}.log"
            proc = procs.spawn(cmd, cwd=self.base_dir / (program.working_dir or "."), env=env, log_path=log_path)
            self.replicas[rid] = _Replica(rid, proc, log_path)
            self.store.upsert_replica(self.job_id, rid.role, rid.index, state="Running", pid=proc.pid,
                                      port=ports[rid], exit_code=None, attempt=self.attempt, started_at=time.time(),
                                      finished_at=None, log_path=str(log_path))
            self._event("Started", f"pid {proc.pid}, port {ports[rid]}, attempt {self.attempt}: {' '.join(cmd)}",
                        replica=rid.name)
        self.store.update_job(self.job_id, state="Running")

    def _watch(self) -> tuple[str, str]:
        """Watch the group until it succeeds, must restart, fails, is cancelled or hits its deadline."""
        exits: dict[ReplicaId, int] = {}
        deadline = self.spec.run_policy.active_deadline
        while True:
            self._pump_logs()
            self._tick()
            if self._stop_signal is not None:
                self._stop_all("cancelled")
                return "cancelled", self._cancel_message()
            if deadline is not None and time.time() - self._started > deadline:
                self._stop_all("deadline")
                return "deadline", f"active_deadline of {deadline:g}s exceeded; stopped every replica"
            newly = [r for r in self.replicas.values() if r.exit_code is None and r.proc.poll() is not None]
            # Failures before successes; a signal kill is likelier the cause than an error exit.
            newly.sort(key=lambda r: (r.proc.returncode == 0, normalize_exit_code(r.proc.returncode) <= 128, r.rid))
            for rep in newly:
                rep.exit_code = normalize_exit_code(rep.proc.returncode)
                exits[rep.rid] = rep.exit_code
                self._record_exit(rep)
                decision = decide(self.spec, rep.rid, rep.exit_code, exits, self.restarts)
                if decision is Decision.SUCCEED:
                    self._finish_success()
                    return "succeeded", f"{rep.rid} succeeded"
                if decision in (Decision.RESTART, Decision.FAIL):
                    self._stop_all("a replica failed")
                    self._pump_logs()
                    summary = self._failure_summary(rep)
                    return ("restart" if decision is Decision.RESTART else "failed"), summary
            if all(r.exit_code is not None for r in self.replicas.values()):
                return "failed", "every replica exited without the success policy being met"
            time.sleep(_POLL)

    def _finish_success(self) -> None:
        """After success: stop ps at once; give workers a grace period and the evaluator its timeout."""
        policy = self.spec.run_policy
        servers_block = bool(self.spec.replica_counts().get("ps"))  # under PSS, workers serve forever
        waits = []
        for rep in self.replicas.values():
            if rep.exit_code is not None:
                continue
            if rep.rid.role == "ps" or (servers_block and rep.rid.role == "worker"):
                waits.append((rep, 0.0))
            elif rep.rid.role == "evaluator":
                waits.append((rep, policy.evaluator_timeout))
            else:
                waits.append((rep, max(policy.grace_period, 30.0)))
        start = time.monotonic()
        while True:
            self._pump_logs()
            self._tick()
            pending = [(rep, w) for rep, w in waits if rep.proc.poll() is None]
            for rep, _ in waits:
                if rep.exit_code is None and rep.proc.poll() is not None:
                    rep.exit_code = normalize_exit_code(rep.proc.returncode)
                    self._record_exit(rep)
            overdue = [rep for rep, w in pending if time.monotonic() - start >= w]
            if overdue:
                for rep in overdue:
                    rep.stopped_by_us = True
                procs.stop_groups([r.proc for r in overdue], policy.grace_period)
                for rep in overdue:
                    rep.exit_code = normalize_exit_code(rep.proc.returncode)
                    self._record_exit(rep)
            if not pending or len(overdue) == len(pending):
                break
            if self._stop_signal is not None:
                self._stop_all("cancelled")
                break
            time.sleep(_POLL)
        self._pump_logs()

    # -- helpers -----------------------------------------------------------------------------
    def _record_exit(self, rep: _Replica) -> None:
        code = rep.exit_code
        if rep.stopped_by_us:
            state = "Stopped"
        else:
            state = "Succeeded" if code == 0 else "Failed"
        self.store.upsert_replica(self.job_id, rep.rid.role, rep.rid.index, state=state, exit_code=code,
                                  finished_at=time.time())
        message = "stopped by multiworker" if rep.stopped_by_us else exit_description(rep.proc.returncode)
        self._event("ExitedWithCode", f"{message} (pid {rep.proc.pid})", replica=rep.rid.name,
                    warning=state == "Failed")

    def _stop_all(self, reason: str) -> None:
        running = [r for r in self.replicas.values() if r.exit_code is None and r.proc.poll() is None]
        for rep in running:
            rep.stopped_by_us = True
        procs.stop_groups([r.proc for r in self.replicas.values()], self.spec.run_policy.grace_period)
        for rep in self.replicas.values():
            if rep.exit_code is None:
                rep.exit_code = normalize_exit_code(rep.proc.returncode if rep.proc.returncode is not None else -9)
                self._record_exit(rep)

    def _failure_summary(self, root: _Replica) -> str:
        failed = [r for r in self.replicas.values() if r is not root and r.exit_code and not r.stopped_by_us]
        as_failure = lambda r: ReplicaFailure(r.rid.name, r.proc.pid, r.proc.returncode, r.log_path)  # noqa: E731
        return summarize(as_failure(root), [as_failure(r) for r in failed])

    def _tick(self) -> None:
        """Periodic work: fault injection, resource samples and the heartbeat."""
        now = time.time()
        for inj in self.injections:
            if inj in self._fired or now - self._first_attempt_started < inj.after:
                continue
            self._fired.add(inj)
            rep = self.replicas.get(inj.replica)
            if rep is None or rep.proc.poll() is not None:
                self._event("InjectedFailure", f"{inj}: {inj.replica} was not running; nothing killed",
                            replica=inj.replica.name, warning=True)
                continue
            procs.signal_group(rep.proc.pid, inj.signal)
            self._event("InjectedFailure", f"sent {inj.signal_name} to {inj.replica} (pid {rep.proc.pid}) "
                        f"{now - self._first_attempt_started:.1f}s after the first attempt started",
                        replica=inj.replica.name, warning=True)
        if now - self._last_sample >= _SAMPLE_EVERY:
            self._last_sample = now
            self._sample()
            if self._progress:
                self.store.set_progress(self.job_id, self.attempt, self._progress)
                self._progress = {}
            self.store.update_job(self.job_id, heartbeat_at=now)

    def _sample(self) -> None:
        import psutil

        rows = []
        for rep in self.replicas.values():
            if rep.exit_code is not None or rep.proc.poll() is not None:
                continue
            try:
                if rep.psutil_proc is None:
                    rep.psutil_proc = psutil.Process(rep.proc.pid)
                members = [rep.psutil_proc, *rep.psutil_proc.children(recursive=True)]
                cpu = sum(p.cpu_percent(None) for p in members)
                rss = sum(p.memory_info().rss for p in members)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            rows.append((rep.rid.name, cpu, rss))
        if rows:
            self.store.add_samples(self.job_id, rows)
            self.obs.on_samples(rows)

    def _pump_logs(self) -> None:
        """Read new output of every replica's log: metric lines go to the store, all to the observer."""
        for rep in self.replicas.values():
            try:
                with open(rep.log_path, "rb") as f:
                    f.seek(rep.offset)
                    chunk = f.read(1 << 20)
            except OSError:
                continue
            if not chunk:
                continue
            rep.offset += len(chunk)
            data = rep.partial + chunk
            *lines, rep.partial = data.replace(b"\r", b"\n").split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace").rstrip()
                if not line:
                    continue
                metric = parse_metric(line)
                if metric is not None:
                    if metric["kind"] != "progress":
                        self.store.add_metric(self.job_id, self.attempt, rep.rid.name, metric)
                    else:
                        self._progress[rep.rid.name] = metric
                    self.obs.on_metric(rep.rid.name, metric, primary=rep.rid == primary_replica(self.spec))
                else:
                    self.obs.on_line(rep.rid.name, line)

    def _finish(self, state: str, message: str, *, reason: str, warning: bool = False) -> str:
        self.store.update_job(self.job_id, state=state, finished_at=time.time(), message=message,
                              restarts=self.restarts, heartbeat_at=time.time())
        self._event(reason, message, warning=warning)
        self.obs.on_finish(state, message)
        return state

    def _event(self, reason: str, message: str, *, replica: str | None = None, warning: bool = False) -> None:
        self.store.add_event(self.job_id, reason, message, replica=replica, warning=warning)
        self.obs.on_event(reason, message, replica=replica, warning=warning)

    def _cancel_message(self) -> str:
        name = signal.Signals(self._stop_signal).name if self._stop_signal else "cancel"
        return f"cancelled by {name}; every replica stopped"

    def _sleep(self, seconds: float) -> bool:
        """Sleep while keeping the heartbeat; True if a stop was requested meanwhile."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if self._stop_signal is not None:
                return True
            self.store.update_job(self.job_id, heartbeat_at=time.time())
            time.sleep(min(0.2, max(0.0, end - time.monotonic())))
        return self._stop_signal is not None

    def _install_signal_handlers(self) -> None:
        def handler(signum, _frame):
            self._stop_signal = signum

        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            try:
                signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
