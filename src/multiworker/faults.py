"""Fault injection: kill, stop or preempt a replica once, to prove recovery before the cloud does it to you.

``ROLE-INDEX@WHEN[:ACTION]`` where WHEN is a duration after the first attempt started (``15s``),
or a point in training read from the replica's output, which is the same on any machine:
``epoch:N`` once the replica has finished epoch N, ``step:N`` once it reports step N or later
(steps counted from the start of training, across epochs; see :mod:`multiworker.progress`). A
replica that reports nothing (often only the chief or worker 0 does) follows the job's progress as
the others report it. ``ROLE-*`` targets every replica of the role at once (a zone going away).

ACTION is a signal (``KILL``, the default, ``TERM``, ``INT``, ``SEGV``...), ``STOP`` (the replica
freezes: a hang, which hang detection then finds), ``CONT`` (resume a stopped replica; never before a ``STOP`` of the same replica fires), or
``PREEMPT=<notice>`` (as a spot VM is reclaimed: SIGTERM, the notice, then SIGKILL).
"""

from __future__ import annotations

import dataclasses
import math
import signal

from multiworker.cluster import ReplicaId
from multiworker.errors import UserError
from multiworker.progress import keras_progress
from multiworker.spec.model import JobSpec, parse_duration

__all__ = ["Injection", "Injector", "parse_injection", "check_injections"]

# Signals that are ignored by default, or stop a process in a way STOP says better: injecting them proves nothing.
_NOT_A_FAILURE = frozenset({signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCHLD, signal.SIGURG,
                            signal.SIGWINCH})
EVERY = -1  # the index of ``ROLE-*``: every replica of the role


@dataclasses.dataclass(frozen=True)
class Injection:
    replica: ReplicaId
    after: float  # seconds after the first attempt started (trigger "time"), else the epoch or step
    signal: int = signal.SIGKILL
    trigger: str = "time"  # time | epoch | step
    notice: float | None = None  # PREEMPT: seconds between SIGTERM and SIGKILL

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signal).name

    @property
    def action(self) -> str:
        """How the action is written: ``KILL``, ``STOP``, ``PREEMPT=30s``."""
        if self.notice is not None:
            return f"PREEMPT={self.notice:g}s"
        return self.signal_name.removeprefix("SIG")

    @property
    def target(self) -> str:
        return f"{self.replica.role}-*" if self.replica.index == EVERY else self.replica.name

    def expand(self, counts: dict[str, int]) -> list[Injection]:
        """One injection per replica ``ROLE-*`` stands for (itself otherwise)."""
        if self.replica.index != EVERY:
            return [self]
        return [dataclasses.replace(self, replica=ReplicaId(self.replica.role, i))
                for i in range(counts.get(self.replica.role, 0))]

    @property
    def when(self) -> str:
        return f"{self.after:g}s" if self.trigger == "time" else f"{self.trigger}:{int(self.after)}"

    def __str__(self) -> str:
        return f"{self.target}@{self.when}:{self.action}"


def _parse_target(text: str) -> ReplicaId:
    role, sep, index = text.strip().rpartition("-")
    if sep and index == "*":
        ReplicaId.parse(f"{role}-0")  # the role must be one
        return ReplicaId(role, EVERY)
    return ReplicaId.parse(text)


def parse_injection(text: str) -> Injection:
    """Parse ``worker-1@15s:KILL``, ``worker-1@epoch:2``, ``worker-1@step:300:STOP`` or
    ``worker-*@step:200:PREEMPT=30s``; the action defaults to KILL."""
    usage = ("write it like worker-1@15s, worker-1@epoch:2, worker-1@step:300:STOP, worker-1@60s:CONT "
             "or worker-*@step:200:PREEMPT=30s")
    target, at, rest = text.partition("@")
    if not at:
        raise UserError(f"--inject-failure {text!r}: missing '@WHEN'; {usage}")
    trigger = "time"
    head, _, tail = rest.partition(":")
    if head.strip().lower() in ("epoch", "step"):
        trigger = head.strip().lower()
        rest = tail
    when, _, sig_text = rest.partition(":")
    try:
        replica = _parse_target(target)
        if trigger == "time":
            after = parse_duration(when)
        elif when.strip().isdigit() and int(when) >= (1 if trigger == "epoch" else 0):
            after = float(int(when))
        else:
            raise ValueError(f"{trigger}:{when} needs a whole number{' >= 1' if trigger == 'epoch' else ''}")
    except ValueError as exc:
        raise UserError(f"--inject-failure {text!r}: {exc}; {usage}") from None
    sig = signal.SIGKILL
    if not math.isfinite(after):
        raise UserError(f"--inject-failure {text!r}: the time must be a finite duration; {usage}")
    notice = None
    if sig_text.strip().upper().startswith("PREEMPT"):
        _, eq, notice_text = sig_text.partition("=")
        try:
            notice = parse_duration(notice_text) if eq else 30.0
        except ValueError as exc:
            raise UserError(f"--inject-failure {text!r}: PREEMPT={notice_text}: {exc}; {usage}") from None
        if not math.isfinite(notice):
            raise UserError(f"--inject-failure {text!r}: the notice must be a finite duration; {usage}")
        return Injection(replica, after, int(signal.SIGTERM), trigger, notice)
    if sig_text:
        name = sig_text.strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        try:
            sig = signal.Signals[name] if not sig_text.strip().isdigit() else signal.Signals(int(sig_text))
        except (KeyError, ValueError):
            raise UserError(f"--inject-failure {text!r}: unknown signal or action {sig_text!r}; use KILL, TERM, INT, STOP, "
                            "CONT, PREEMPT=30s or a signal number") from None
        if sig in _NOT_A_FAILURE:
            raise UserError(f"--inject-failure {text!r}: {signal.Signals(sig).name} is ignored or stops a process "
                            "silently; use STOP for a hang, or KILL, TERM, INT, SEGV or ABRT for a failure")
    return Injection(replica, after, int(sig), trigger)


def check_injections(spec: JobSpec, injections: list[Injection]) -> None:
    """Every target exists in the job."""
    counts = spec.replica_counts()
    for inj in injections:
        if inj.replica.index == EVERY and not counts.get(inj.replica.role):
            have = ", ".join(f"{r} x{n}" for r, n in counts.items())
            raise UserError(f"--inject-failure {inj}: the job has no {inj.replica.role} replicas (it has {have})")
        if inj.replica.index >= counts.get(inj.replica.role, 0):
            have = ", ".join(f"{r} x{n}" for r, n in counts.items())
            raise UserError(f"--inject-failure {inj}: the job has no {inj.replica} (it has {have})")


class Injector:
    """Which injections are due: each fires once, by time into the first attempt, or when its replica's
    metric lines show the epoch or step reached (in any attempt: a resumed run that is already past
    it fires at once)."""

    def __init__(self, injections: list[Injection]):
        self.pending = list(injections)
        self._epoch_done: dict[str, int] = {}
        self._step: dict[str, int] = {}
        self._epochs = 0  # the job's epochs, as its metric lines say
        self._keras_epoch: dict[str, int] = {}

    def observe(self, replica: str, metric: dict) -> None:
        """A metric line of ``replica``: remember the last finished epoch and the global step."""
        epoch, step, steps = metric.get("epoch"), metric.get("step"), metric.get("steps")
        if isinstance(metric.get("epochs"), int):
            self._epochs = max(self._epochs, metric["epochs"])
        if metric.get("kind") == "epoch" and isinstance(epoch, int):
            self._epoch_done[replica] = max(self._epoch_done.get(replica, 0), epoch)
            if isinstance(steps, int):
                self._step[replica] = max(self._step.get(replica, 0), epoch * steps)
        elif metric.get("kind") == "progress" and isinstance(step, int):
            done = (epoch - 1) * steps if isinstance(epoch, int) and isinstance(steps, int) and epoch > 0 else 0
            self._step[replica] = max(self._step.get(replica, 0), done + step)

    def observe_line(self, replica: str, line: str) -> None:
        """Another output line of ``replica``: Keras's progress bar counts as a progress report."""
        parsed = keras_progress(line)
        if parsed is None:
            return
        kind, a, b = parsed
        if kind == "epoch":
            self._keras_epoch[replica] = a
            self._epoch_done[replica] = max(self._epoch_done.get(replica, 0), a - 1)
        else:
            epoch = self._keras_epoch.get(replica, 1)
            self.observe(replica, {"kind": "progress", "epoch": epoch, "step": a, "steps": b})
            if a == b:
                self._epoch_done[replica] = max(self._epoch_done.get(replica, 0), epoch)

    def _reached(self, inj: Injection, elapsed: float) -> bool:
        # Synchronous training moves every replica together, and often only the chief (or worker 0)
        # reports: a replica that reports nothing follows the job's progress.
        name = inj.replica.name
        if inj.trigger == "epoch":
            done = self._epoch_done.get(name, max(self._epoch_done.values(), default=0))
            return done >= inj.after
        if inj.trigger == "step":
            return self._step.get(name, max(self._step.values(), default=-1)) >= inj.after
        return elapsed >= inj.after

    def training_done(self) -> bool:
        """The job's last epoch has finished (an injection now kills a job that is only saving or
        exiting, and its restart trains again instead of resuming)."""
        return self._epochs > 0 and max(self._epoch_done.values(), default=0) >= self._epochs

    def advice(self, inj: Injection) -> str:
        """How to make ``inj`` land mid-training instead."""
        epoch_steps = [s // e for r, s in self._step.items() if (e := self._epoch_done.get(r))]
        step = f"step:{max(epoch_steps) // 2}" if epoch_steps else "step:N"
        return (f"the last epoch ({self._epochs}) had finished, so this tests no recovery; to kill it mid-training "
                f"inject at {inj.replica}@{step}" + (f" or @epoch:{self._epochs - 1}" if self._epochs > 1 else ""))

    def due(self, elapsed: float) -> list[Injection]:
        """The injections due now, ``elapsed`` seconds after the first attempt started (each only once).
        A CONT never fires before a STOP of the same replica still waiting to fire."""
        now = []
        for inj in self.pending:
            if not self._reached(inj, elapsed):
                continue
            stop_waits = any(o.replica == inj.replica and o.signal == signal.SIGSTOP and o not in now
                             for o in self.pending)
            if inj.signal == signal.SIGCONT and stop_waits:
                continue
            now.append(inj)
        self.pending = [inj for inj in self.pending if inj not in now]
        return now
