"""Topology -> the environment each replica gets, as TFJob and Vertex AI give it (pure functions).

TF_CONFIG follows Kubeflow TFJob and Vertex: ``cluster`` (evaluator left out, as Vertex and AI
Platform do), ``task`` {type, index} and ``environment: cloud``. CLUSTER_SPEC is Vertex's
workerpool form. AIP_* directories live under the job's output directory.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

from multiworker.framework_env import framework_env, uses_torchrun
from multiworker.spec.model import ROLES, JobSpec

__all__ = [
    "ReplicaId",
    "replica_ids",
    "primary_replica",
    "cluster_map",
    "tf_config",
    "cluster_spec",
    "vertex_cluster_spec",
    "thread_budget",
    "replica_env",
    "VERTEX_POOL_OF_ROLE",
    "SINGLE_REPLICA_ENV",
]

# Vertex worker pool position by role.
VERTEX_POOL_OF_ROLE = {"chief": 0, "worker": 1, "ps": 2, "evaluator": 3}
# Roles that join the TensorFlow cluster (the evaluator stays outside it).
CLUSTER_ROLES = ("chief", "worker", "ps")


@dataclasses.dataclass(frozen=True, order=True)
class ReplicaId:
    """One replica of a pool: ``worker-1`` is ReplicaId("worker", 1)."""

    role: str
    index: int

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, text: str) -> ReplicaId:
        role, sep, index = text.strip().rpartition("-")
        if not sep or role not in ROLES or not index.isdigit():
            raise ValueError(f"{text!r} is not a replica name; write it like worker-1 or chief-0")
        return cls(role, int(index))


def replica_ids(spec: JobSpec) -> list[ReplicaId]:
    """All replicas in TensorFlow's order: chief, workers, ps, evaluator."""
    return [ReplicaId(role, i) for role, n in spec.replica_counts().items() for i in range(n)]


def primary_replica(spec: JobSpec) -> ReplicaId:
    """The replica whose success decides the job: the chief, or worker 0 without one."""
    return ReplicaId("chief", 0) if spec.replica_counts().get("chief") else ReplicaId("worker", 0)


def cluster_map(spec: JobSpec, addresses: Mapping[ReplicaId, str]) -> dict[str, list[str]]:
    """TF_CONFIG's ``cluster``: ``host:port`` of chief, worker and ps tasks (never the evaluator)."""
    counts = spec.replica_counts()
    out: dict[str, list[str]] = {}
    for role in CLUSTER_ROLES:
        if counts.get(role):
            key = spec.chief_task_type if role == "chief" else role
            out[key] = [addresses[ReplicaId(role, i)] for i in range(counts[role])]
    return out


#: What each platform sets for a job of one replica, by the format the job came from (a gcloud line
#: counts as its platform's config); docs/environment.md cites each. Jobs of several replicas get both
#: everywhere. AI Platform sets TF_CONFIG "on every VM of every training job"; Vertex AI sets
#: CLUSTER_SPEC on every replica but TF_CONFIG only for distributed jobs; the TFJob operator sets no
#: TF_CONFIG for one replica ("Do not set TF_CONFIG for local training jobs"), and neither does the
#: JobSet entry point, which follows it; multiworker's own spec does as TFJob does.
SINGLE_REPLICA_ENV: dict[str, frozenset[str]] = {
    "aiplatform": frozenset({"TF_CONFIG", "CLUSTER_SPEC"}),
    "vertex": frozenset({"CLUSTER_SPEC"}),
}


def tf_config(spec: JobSpec, replica: ReplicaId, cluster: Mapping[str, list[str]], *,
              platform: str | None = None) -> dict | None:
    """TF_CONFIG for one replica; for a single-replica job, only where ``platform`` (the job's source
    format) sets one then (AI Platform), else None, as under TFJob."""
    if spec.total_replicas <= 1 and "TF_CONFIG" not in SINGLE_REPLICA_ENV.get(platform or "", ()):
        return None
    task_type = spec.chief_task_type if replica.role == "chief" else replica.role
    return {"cluster": dict(cluster), "task": {"type": task_type, "index": replica.index}, "environment": "cloud"}


def cluster_spec(spec: JobSpec, replica: ReplicaId, addresses: Mapping[ReplicaId, str]) -> dict:
    """Vertex AI's CLUSTER_SPEC: pools by position (without a chief, worker 0 is workerpool0)."""
    return vertex_cluster_spec({rid: addresses[rid] for rid in replica_ids(spec)}, replica)


def vertex_cluster_spec(addresses: Mapping[ReplicaId, str], replica: ReplicaId) -> dict:
    """CLUSTER_SPEC from every replica's address (evaluator included), for ``replica``."""
    has_chief = any(rid.role == "chief" for rid in addresses)
    pools: dict[str, list[str]] = {}
    position: dict[ReplicaId, tuple[str, int]] = {}
    for rid in sorted(addresses, key=lambda r: (ROLES.index(r.role), r.index)):
        pool = VERTEX_POOL_OF_ROLE[rid.role]
        if not has_chief and rid.role == "worker":
            pool = 0 if rid.index == 0 else 1
        name = f"workerpool{pool}"
        pool_addresses = pools.setdefault(name, [])
        position[rid] = (name, len(pool_addresses))
        pool_addresses.append(addresses[rid])
    name, index = position[replica]
    return {"cluster": dict(sorted(pools.items())), "environment": "cloud", "task": {"type": name, "index": index}}


#: TensorFlow's pooling (BFC) allocator for host memory. Once MultiWorkerMirroredStrategy enables
#: collective ops, the default malloc-backed CPU allocator returns freed buffers to the kernel each
#: step and page-faults them back in: measured on 2 cores, MNIST CNN, 2 workers x 1 thread, half of
#: each replica's CPU time went to the kernel and images/s rose 1.6-1.8x with this set (BENCHMARKS.md).
#: A spec's own env may set it to 0.
ALLOCATOR_ENV = {"TF_CPU_ALLOCATOR_USE_BFC": "1"}


def thread_budget(spec: JobSpec, cores: int | None = None) -> int:
    """CPU threads per replica so N replicas on C cores do not oversubscribe them."""
    if spec.threads_per_replica:
        return spec.threads_per_replica
    cores = cores or os.cpu_count() or 1
    return max(1, cores // max(1, spec.total_replicas))


def replica_env(
    spec: JobSpec,
    replica: ReplicaId,
    addresses: Mapping[ReplicaId, str],
    *,
    job_id: str,
    attempt: int,
    output_dir: str,
    cores: int | None = None,
    platform: str | None = None,
) -> dict[str, str]:
    """The variables multiworker adds to one replica's environment (the spec's own env wins, except
    for the launcher's MULTIWORKER_JOB_ID/ATTEMPT/REPLICA).

    ``addresses`` holds every replica's ``host:port`` (each may be on another host). ``platform``: the
    format the job came from (``JobRecord.format``), which decides what a single replica gets.
    """
    env: dict[str, str] = {}
    config = tf_config(spec, replica, cluster_map(spec, addresses), platform=platform)
    if config is not None:
        env["TF_CONFIG"] = json.dumps(config)
    if config is not None or "CLUSTER_SPEC" in SINGLE_REPLICA_ENV.get(platform or "", ()):
        env["CLUSTER_SPEC"] = json.dumps(cluster_spec(spec, replica, addresses))
    out = output_dir.rstrip("/")
    env.update(
        AIP_MODEL_DIR=f"{out}/model",
        AIP_CHECKPOINT_DIR=f"{out}/checkpoints",
        AIP_TENSORBOARD_LOG_DIR=f"{out}/logs",
        MULTIWORKER_OUTPUT_DIR=out,
        MULTIWORKER_JOB_ID=job_id,
        MULTIWORKER_ATTEMPT=str(attempt),
        MULTIWORKER_REPLICA=replica.name,
        TF_USE_LEGACY_KERAS="1",
        PYTHONUNBUFFERED="1",
    )
    threads = thread_budget(spec, cores)
    env.update(
        MULTIWORKER_THREADS=str(threads),
        TF_NUM_INTRAOP_THREADS=str(threads),
        TF_NUM_INTEROP_THREADS=str(min(2, threads)),
        OMP_NUM_THREADS=str(threads),
        **ALLOCATOR_ENV,
    )
    env.update(_framework_env(spec, replica, addresses))
    env.update(spec.resolved(replica.role).env or {})
    # The launcher's own identity wins over the spec: cancel, the watchdog and Lost cleanup find a job's
    # processes by MULTIWORKER_JOB_ID, so a spec must not be able to hide its replicas from them.
    env.update(MULTIWORKER_JOB_ID=job_id, MULTIWORKER_ATTEMPT=str(attempt), MULTIWORKER_REPLICA=replica.name)
    return env


def _framework_env(spec: JobSpec, replica: ReplicaId, addresses: Mapping[ReplicaId, str]) -> dict[str, str]:
    """JAX's or PyTorch's launcher variables for one replica (``multiworker.framework_env``)."""
    program = spec.resolved(replica.role)
    if spec.framework == "tensorflow":
        return {}
    argv = ["python", "-m", program.module] if program.module else list(program.command or [])
    env = framework_env(spec.framework, {r.name: a for r, a in addresses.items()}, replica.name,
                        torchrun=uses_torchrun(argv))
    # The local backend's fork server preloads TensorFlow, which a JAX or PyTorch replica does not want
    # (PyTorch crashes forked from it): start these replicas as new interpreters.
    env["MULTIWORKER_PRELOAD"] = "0"
    return env
