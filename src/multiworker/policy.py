"""Restart and success decisions as a small state machine (pure; table-tested).

The group controller reports each replica exit; :func:`decide` answers what the group does next,
with Kubeflow TFJob's meanings for restart policies and success. :func:`exit_order` says which of
several exits to weigh first (the likeliest root cause), :func:`all_exited` when a group that never
met its success policy is over, and :func:`shutdown_plan` how the rest stop after success.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Iterable, Mapping

from multiworker.cluster import ReplicaId, primary_replica
from multiworker.spec.model import JobSpec

__all__ = [
    "Decision", "decide", "decide_start_failure", "decide_hang", "is_retryable", "normalize_exit_code", "exit_description", "backoff_delay", "exit_order",
    "all_exited", "shutdown_plan",
]

# After success, a worker still running (e.g. saving its temporary model copy) gets at least this long.
MIN_WORKER_GRACE = 30.0


class Decision(enum.Enum):
    CONTINUE = "continue"  # keep watching
    SUCCEED = "succeed"  # the job succeeded: stop ps, let workers and the evaluator finish
    RESTART = "restart"  # restart the whole group
    FAIL = "fail"  # the job failed


def normalize_exit_code(returncode: int) -> int:
    """Popen's -N (killed by signal N) becomes 128+N, the shell's and Kubernetes' convention."""
    return 128 - returncode if returncode < 0 else returncode


def exit_description(returncode: int) -> str:
    """'exit code 1' or 'signal SIGKILL (exit code 137)'."""
    code = normalize_exit_code(returncode)
    if code > 128:
        try:
            return f"signal {signal.Signals(code - 128).name} (exit code {code})"
        except ValueError:
            pass
    return f"exit code {code}"


def is_retryable(restart_policy: str, exit_code: int) -> bool:
    """Whether a replica failure with ``exit_code`` (normalized) may restart the group."""
    if restart_policy in ("OnFailure", "Always"):
        return True
    if restart_policy == "ExitCode":
        return exit_code >= 128  # signals and infrastructure kills; 1-127 are the program's own errors
    return False


def decide(
    spec: JobSpec,
    replica: ReplicaId,
    exit_code: int,
    exits: Mapping[ReplicaId, int],
    restarts: int,
) -> Decision:
    """What to do after ``replica`` exited with ``exit_code`` (normalized).

    ``exits`` holds the exit codes of every replica of this attempt that has exited so far
    (including this one); ``restarts`` is how many group restarts already happened.
    """
    policy = spec.run_policy
    if exit_code != 0:
        if is_retryable(policy.restart_policy, exit_code) and restarts < policy.backoff_limit:
            return Decision.RESTART
        return Decision.FAIL
    if replica.role in ("ps", "evaluator"):
        return Decision.CONTINUE
    if policy.success_policy == "chief":
        return Decision.SUCCEED if replica == primary_replica(spec) else Decision.CONTINUE
    counts = spec.replica_counts()
    training = [ReplicaId(r, i) for r in ("chief", "worker") for i in range(counts.get(r, 0))]
    if all(exits.get(r) == 0 for r in training):
        return Decision.SUCCEED
    return Decision.CONTINUE


def decide_start_failure(spec: JobSpec, restarts: int) -> Decision:
    """After an attempt's replicas could not be placed or started (resources busy, a node gone): an
    infrastructure failure, retried as a signal kill would be (every policy but ``Never``)."""
    policy = spec.run_policy
    if is_retryable(policy.restart_policy, 128) and restarts < policy.backoff_limit:
        return Decision.RESTART
    return Decision.FAIL


def decide_hang(spec: JobSpec, restarts: int) -> Decision:
    """After a hang (the group stopped by multiworker): retried as a signal kill would be."""
    return decide_start_failure(spec, restarts)


def backoff_delay(spec: JobSpec, restarts: int, cap: float = 60.0) -> float:
    """Delay before restart number ``restarts + 1``: base, doubling each time, capped."""
    return min(cap, spec.run_policy.backoff * (2**restarts))


def exit_order(returncodes: Mapping[ReplicaId, int]) -> list[ReplicaId]:
    """Replicas that exited together, the likeliest root cause first: failures before successes,
    a signal kill before an error exit (survivors of a killed peer exit with errors), then by name.
    ``returncodes`` are raw (negative for a signal)."""
    def key(rid: ReplicaId) -> tuple[bool, bool, ReplicaId]:
        code = returncodes[rid]
        return code == 0, normalize_exit_code(code) <= 128, rid

    return sorted(returncodes, key=key)


def all_exited(replicas: Iterable[ReplicaId], exits: Mapping[ReplicaId, int]) -> bool:
    """Every replica has exited: with the success policy not met by then, the attempt has failed."""
    return all(r in exits for r in replicas)


def shutdown_plan(spec: JobSpec, running: Iterable[ReplicaId]) -> dict[ReplicaId, float]:
    """After success: seconds each replica still running may go on before it is stopped.

    Parameter servers stop at once (and so do workers under ParameterServerStrategy, which serve
    forever); an evaluator may finish its last evaluation (``evaluator_timeout``); other workers get
    the grace period, at least :data:`MIN_WORKER_GRACE`.
    """
    policy = spec.run_policy
    servers_block = bool(spec.replica_counts().get("ps"))
    plan = {}
    for rid in running:
        if rid.role == "ps" or (servers_block and rid.role == "worker"):
            plan[rid] = 0.0
        elif rid.role == "evaluator":
            plan[rid] = policy.evaluator_timeout
        else:
            plan[rid] = max(policy.grace_period, MIN_WORKER_GRACE)
    return plan
