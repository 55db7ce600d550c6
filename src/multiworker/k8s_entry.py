"""In-pod entry point of JobSet replicas: build TF_CONFIG and CLUSTER_SPEC from the cluster map and
the pod's completion index, then exec the training program.

    python -m multiworker.k8s_entry -- python -m trainer.task --epochs 3

JobSet (unlike the TFJob operator) sets no TF_CONFIG, so each pod derives its own from what the
manifest written by ``multiworker convert --to jobset`` gives every container:

- ``MW_CLUSTER``: JSON ``{role: ["host:port", ...]}`` for every role, the evaluator included;
- ``MW_ROLE``: this pod's role (chief, worker, ps, evaluator);
- ``JOB_COMPLETION_INDEX``: set by Kubernetes in every pod of an Indexed Job; the task index;
- ``MW_CHIEF_TASK_TYPE``: ``master`` for TF 1 style jobs (default ``chief``);
- ``MW_FRAMEWORK``: ``jax`` or ``pytorch`` adds that framework's launcher variables
  (``multiworker.framework_env``); ``MW_TORCHRUN=1`` adds torchrun's ``PET_*``.

Works without multiworker's launcher: only this module and ``multiworker.cluster`` run in the pod.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Mapping

from multiworker.cluster import (
    ALLOCATOR_ENV,
    CLUSTER_ROLES,
    ReplicaId,
    vertex_cluster_spec,
)
from multiworker.framework_env import framework_env

__all__ = ["pod_env", "main"]

logger = logging.getLogger(__name__)


class EntryError(ValueError):
    """The pod's environment does not describe a replica (a hand-edited manifest)."""


def pod_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to a pod's environment: TF_CONFIG, CLUSTER_SPEC and MULTIWORKER_REPLICA."""
    try:
        cluster = json.loads(environ["MW_CLUSTER"])
        role = environ["MW_ROLE"]
        index = int(environ.get("JOB_COMPLETION_INDEX", "0"))
    except KeyError as exc:
        raise EntryError(f"{exc.args[0]} is not set; run this in a pod of a JobSet written by "
                         "`multiworker convert --to jobset`") from exc
    except ValueError as exc:
        raise EntryError(f"MW_CLUSTER or JOB_COMPLETION_INDEX is malformed: {exc}") from exc
    if role not in cluster or not 0 <= index < len(cluster[role]):
        raise EntryError(f"{role}-{index} is not in MW_CLUSTER ({', '.join(cluster)})")
    chief_type = environ.get("MW_CHIEF_TASK_TYPE") or "chief"
    replica = ReplicaId(role, index)
    env = {"MULTIWORKER_REPLICA": replica.name, "TF_USE_LEGACY_KERAS": environ.get("TF_USE_LEGACY_KERAS", "1"),
           "PYTHONUNBUFFERED": "1", **{k: environ.get(k, v) for k, v in ALLOCATOR_ENV.items()}}
    if sum(len(v) for v in cluster.values()) > 1:  # a single replica gets no TF_CONFIG, as under TFJob
        tf_cluster = {(chief_type if r == "chief" else r): list(cluster[r]) for r in CLUSTER_ROLES if cluster.get(r)}
        task_type = chief_type if role == "chief" else role
        env["TF_CONFIG"] = json.dumps({"cluster": tf_cluster, "task": {"type": task_type, "index": index},
                                       "environment": "cloud"})
        addresses = {ReplicaId(r, i): a for r, addrs in cluster.items() for i, a in enumerate(addrs)}
        env["CLUSTER_SPEC"] = json.dumps(vertex_cluster_spec(addresses, replica))
    members = {f"{r}-{i}": a for r, addrs in cluster.items() for i, a in enumerate(addrs)}
    env.update(framework_env(environ.get("MW_FRAMEWORK") or "tensorflow", members, replica.name,
                             torchrun=environ.get("MW_TORCHRUN") == "1"))
    return env


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        sys.stderr.write("usage: python -m multiworker.k8s_entry -- COMMAND [ARGS...]\n")
        return 2
    try:
        env = pod_env(os.environ)
    except EntryError as exc:
        sys.stderr.write(f"error: multiworker.k8s_entry: {exc}\n")
        return 2
    os.environ.update(env)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"error: multiworker.k8s_entry: cannot run {argv[0]!r}: {exc}\n")
        return 127


if __name__ == "__main__":
    sys.exit(main())
