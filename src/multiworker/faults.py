"""Fault injection: ``ROLE-INDEX@DURATION[:SIGNAL]`` kills that replica once, that long after
the first attempt started, so users can prove recovery before the cloud does it to them."""

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
    after: float
    signal: int = signal.SIGKILL

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signal).name

    def __str__(self) -> str:
        return f"{self.replica}@{self.after:g}s:{self.signal_name.removeprefix('SIG')}"


def parse_injection(text: str) -> Injection:
    """Parse ``worker-1@15s:KILL``; the signal defaults to KILL."""
    usage = "write it like worker-1@15s or worker-1@15s:TERM"
    target, at, rest = text.partition("@")
    if not at:
        raise UserError(f"--inject-failure {text!r}: missing '@DURATION'; {usage}")
    when, _, sig_text = rest.partition(":")
    try:
        replica = ReplicaId.parse(target)
        after = parse_duration(when)
    except ValueError as exc:
        raise UserError(f"--inject-failure {text!r}: {exc}") from None
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
    return Injection(replica, after, int(sig))


def check_injections(spec: JobSpec, injections: list[Injection]) -> None:
    """Every target exists in the job."""
    counts = spec.replica_counts()
    for inj in injections:
        if inj.replica.index >= counts.get(inj.replica.role, 0):
            have = ", ".join(f"{r} x{n}" for r, n in counts.items())
            raise UserError(f"--inject-failure {inj}: the job has no {inj.replica} (it has {have})")


class Injector:
    """Which injections are due: each fires once, ``after`` seconds into the job's first attempt."""

    def __init__(self, injections: list[Injection]):
        self.pending = list(injections)

    def due(self, elapsed: float) -> list[Injection]:
        """The injections due ``elapsed`` seconds after the first attempt started (each only once)."""
        now = [inj for inj in self.pending if elapsed >= inj.after]
        self.pending = [inj for inj in self.pending if inj not in now]
        return now
