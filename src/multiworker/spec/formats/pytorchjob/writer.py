"""Native spec -> Kubeflow PyTorchJob ``kubeflow.org/v1`` manifest (training-operator v1.9 meanings).

The operator sets MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK (Master 0, Worker i is i+1) and the
PET_* variables in the ``pytorch`` container, whose ``pytorchjob-port`` is the master's port. The
chief is the Master; a job of workers only makes worker 0 the Master, so every rank is the same as
under ``multiworker run``. The job succeeds when the Master does.
"""

from __future__ import annotations

from typing import Any

from multiworker.spec.formats.target import (
    DNS_1035,
    Target,
    check_hostnames,
    cloud_path,
    dns_1035_label,
    safe_name,
    seconds,
)
from multiworker.spec.formats.tfjob import writer as to_tfjob

__all__ = ["write", "CONTAINER", "PORT", "PORT_NAME"]

PLATFORM = "Kubeflow PyTorchJob"
CONTAINER = "pytorch"  # the operator finds the master port in the container with this name
PORT_NAME = "pytorchjob-port"
PORT = 23456  # the operator's default


def write(t: Target) -> dict:
    spec = t.spec
    policy = spec.run_policy
    output = cloud_path(t, "output_dir", spec.output_dir, PLATFORM, absolute_ok=True)
    counts = spec.replica_counts()
    if policy.success_policy == "all_workers":
        t.lose("run_policy.success_policy", "a PyTorchJob succeeds when its Master does; it has no all_workers")
    if "chief" in counts:
        pools = [("Master", "chief", 1), ("Worker", "worker", counts.get("worker", 0))]
    else:
        pools = [("Master", "worker", 1), ("Worker", "worker", counts["worker"] - 1)]
        t.notes.append("pools.worker: worker 0 becomes the PyTorchJob's Master (rank 0), the others its Workers")
    replica_specs: dict[str, Any] = {}
    for rtype, role, replicas in pools:
        if not replicas:
            continue
        pod = to_tfjob.pod(t, role, output, PLATFORM)
        container = pod["containers"][0]
        container["name"] = CONTAINER
        container["ports"] = [{"name": PORT_NAME, "containerPort": PORT}]
        replica_specs[rtype] = {"replicas": replicas, "restartPolicy": policy.restart_policy,
                                "template": {"spec": pod}}
    run_policy: dict[str, Any] = {"backoffLimit": policy.backoff_limit}
    if policy.active_deadline is not None:
        run_policy["activeDeadlineSeconds"] = seconds(policy.active_deadline)
    # as for a TFJob: RFC 1035 names, and each replica's Service is ``<name>-<type>-<index>``
    name = safe_name(spec.name, DNS_1035, dns_1035_label, t, PLATFORM)
    check_hostnames(t, name, [f"{name}-{rtype.lower()}-{specs['replicas'] - 1}" for rtype, specs in replica_specs.items()],
                    "replica service name")
    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"runPolicy": run_policy, "pytorchReplicaSpecs": replica_specs}}
