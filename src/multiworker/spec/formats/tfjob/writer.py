"""Native spec -> Kubeflow TFJob ``kubeflow.org/v1`` manifest."""

from __future__ import annotations

from typing import Any

from multiworker.spec.formats.target import (
    DNS_1035,
    Target,
    check_hostnames,
    cloud_path,
    dns_1035_label,
    env_list,
    safe_name,
    seconds,
)
from multiworker.spec.formats.tfjob.reader import (
    ACCELERATOR_LABEL,
    AIP_DIRS,
    CONTAINER,
    GPU_RESOURCE,
    INSTANCE_TYPE_LABEL,
)

__all__ = ["write", "pod", "REPLICA_TYPE"]

PLATFORM = "Kubeflow TFJob"
REPLICA_TYPE = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
_MACHINE = ("machine_type", "accelerator_type", "accelerator_count", "cpu", "memory")


def write(t: Target) -> dict:
    spec = t.spec
    policy = spec.run_policy
    output = cloud_path(t, "output_dir", spec.output_dir, PLATFORM, absolute_ok=True)
    replica_specs: dict[str, Any] = {}
    for role, replicas in spec.replica_counts().items():
        rtype = "Master" if role == "chief" and spec.chief_task_type == "master" else REPLICA_TYPE[role]
        replica_specs[rtype] = {
            "replicas": replicas,
            "restartPolicy": policy.restart_policy,
            "template": {"spec": pod(t, role, output)},
        }
    run_policy: dict[str, Any] = {"backoffLimit": policy.backoff_limit}
    if policy.active_deadline is not None:
        run_policy["activeDeadlineSeconds"] = seconds(policy.active_deadline)
    body: dict[str, Any] = {"runPolicy": run_policy}
    if policy.success_policy == "all_workers":
        body["successPolicy"] = "AllWorkers"
    body["tfReplicaSpecs"] = replica_specs
    # the TFJob webhook takes RFC 1035 names; each replica's Service is ``<name>-<type>-<index>``
    name = safe_name(spec.name, DNS_1035, dns_1035_label, t, PLATFORM)
    check_hostnames(t, name, [f"{name}-{rtype.lower()}-{specs['replicas'] - 1}" for rtype, specs in replica_specs.items()],
                    "replica service name")
    return {"apiVersion": "kubeflow.org/v1", "kind": "TFJob", "metadata": {"name": name}, "spec": body}


def pod(t: Target, role: str, output: str | None, platform: str = PLATFORM) -> dict:
    """The pod spec of one pool: its `tensorflow` container, AIP_* dirs under the output, machine settings."""
    program = t.program(role)
    container: dict[str, Any] = {"name": CONTAINER, "image": program.image}
    command = t.command(program)
    if command:
        container["command"] = command
    if program.args:
        container["args"] = list(program.args)
    env = {k: f"{output.rstrip('/')}/{d}" for k, d in AIP_DIRS.items()} if output else {}
    env.update(program.env or {})
    if env:
        container["env"] = env_list(env)
    machine = t.machine_keys(role, program.machine, _MACHINE, platform)
    limits = {k: str(machine[k]) for k in ("cpu", "memory") if k in machine}
    if "accelerator_count" in machine:
        limits[GPU_RESOURCE] = str(machine["accelerator_count"])
    if limits:
        container["resources"] = {"limits": limits}
    out: dict[str, Any] = {"containers": [container]}
    selector = {}
    if "machine_type" in machine:
        selector[INSTANCE_TYPE_LABEL] = str(machine["machine_type"])
    if "accelerator_type" in machine:
        selector[ACCELERATOR_LABEL] = str(machine["accelerator_type"]).lower().replace("_", "-")
    if selector:
        out["nodeSelector"] = selector
    if t.explicit("grace_period"):
        out["terminationGracePeriodSeconds"] = seconds(t.spec.run_policy.grace_period)
    return out
