"""Fault injection: kill a replica once, to prove recovery before the cloud does it to you.

``ROLE-INDEX@WHEN[:SIGNAL]`` where WHEN is a duration after the first attempt started (``15s``),
or a point in training read from the replica's metric lines, which is the same on any machine:
``epoch:N`` once the replica has finished epoch N, ``step:N`` once it reports step N or later
(steps counted from the start of training, across epochs). A replica that reports no metric lines
(often only the chief or worker 0 does) follows the job's progress as the others report it.
"""

from __future__ import annotations

import dataclasses
import math
import signal

from multiworker.cluster import ReplicaId
from multiworker.errors import UserError
from multiworker.spec.model import JobSpec, parse_duration

__all__ = ["Injection", "Injector", "parse_injection", "check_injections"]

# Signals that pause, resume or are ignored by default: injecting them proves nothing and hangs the job.
_NOT_A_FAILURE = frozenset({signal.SIGSTOP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGCONT,
                            signal.SIGCHLD, signal.SIGURG, signal.SIGWINCH})


@dataclasses.dataclass(frozen=True)
class Injection:
    replica: ReplicaId
    after: float  # seconds after the first attempt started (trigger "time"), else the epoch or step
    signal: int = signal.SIGKILL
    trigger: str = "time"  # time | epoch | step

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signal).name

    @property
    def when(self) -> str:
        return f"{self.after:g}s" if self.trigger == "time" else f"{self.trigger}:{int(self.after)}"

    def __str__(self) -> str:
        return f"{self.replica}@{self.when}:{self.signal_name.removeprefix('SIG')}"


def parse_injection(text: str) -> Injection:
    """Parse ``worker-1@15s:KILL``, ``worker-1@epoch:2`` or ``worker-1@step:300:TERM``; the signal defaults to KILL."""
    usage = "write it like worker-1@15s, worker-1@epoch:2, worker-1@step:300 or worker-1@15s:TERM"
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
        replica = ReplicaId.parse(target)
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
    if sig_text:
        name = sig_text.strip().upper()
        name = name if name.startswith("SIG") else f"SIG{name}"
        try:
            sig = signal.Signals[name] if not sig_text.strip().isdigit() else signal.Signals(int(sig_text))
        except (KeyError, ValueError):
            raise UserError(f"--inject-failure {text!r}: unknown signal {sig_text!r}; use KILL, TERM, INT or a number") from None
        if sig in _NOT_A_FAILURE:
            raise UserError(f"--inject-failure {text!r}: {signal.Signals(sig).name} does not end a process (it would "
                            "stop or be ignored, and the job would hang); use KILL, TERM, INT, SEGV or ABRT")
    return Injection(replica, after, int(sig), trigger)


def check_injections(spec: JobSpec, injections: list[Injection]) -> None:
    """Every target exists in the job."""
    counts = spec.replica_counts()
    for inj in injections:
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
        """The injections due now, ``elapsed`` seconds after the first attempt started (each only once)."""
        now = [inj for inj in self.pending if self._reached(inj, elapsed)]
        self.pending = [inj for inj in self.pending if inj not in now]
        return now
