"""Restart and success decisions as a small state machine (pure; table-tested).

The supervisor reports each replica exit; :func:`decide` answers what the group does next,
with Kubeflow TFJob's meanings for restart policies and success.
"""

from __future__ import annotations

import enum
import signal
from collections.abc import Mapping

from multiworker.cluster import ReplicaId, primary_replica
from multiworker.spec.model import JobSpec

__all__ = ["Decision", "decide", "is_retryable", "normalize_exit_code", "exit_description", "backoff_delay"]


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


def backoff_delay(spec: JobSpec, restarts: int, cap: float = 60.0) -> float:
    """Delay before restart number ``restarts + 1``: base, doubling each time, capped."""
    return min(cap, spec.run_policy.backoff * (2**restarts))
