"""Native spec -> Vertex AI CustomJob (displayName + jobSpec; `gcloud --config` takes the jobSpec part)."""

from __future__ import annotations

from typing import Any

from multiworker.spec.formats.frameworks import VERTEX_ENTRY, framework_vars
from multiworker.spec.formats.target import (
    DEFAULT_MACHINE_TYPE,
    Target,
    cloud_path,
    env_list,
    seconds,
)
from multiworker.spec.formats.vertex.reader import POOL_ROLES

__all__ = ["write"]

PLATFORM = "Vertex AI"
_MACHINE_SPEC = {"machine_type": "machineType", "accelerator_type": "acceleratorType",
                 "accelerator_count": "acceleratorCount", "gpu_partition_size": "gpuPartitionSize",
                 "tpu_topology": "tpuTopology"}
_DISK_SPEC = {"boot_disk_type": "bootDiskType", "boot_disk_size_gb": "bootDiskSizeGb"}


def write(t: Target) -> dict:
    spec = t.spec
    if spec.chief_task_type == "master":
        t.lose("chief_task_type", "Vertex AI always names the first pool `chief` in TF_CONFIG")
    pools: list[dict[str, Any]] = [{} for _ in POOL_ROLES]
    for role, replicas, program_role in t.roles(PLATFORM):
        pools[POOL_ROLES.index(role)] = _pool(t, role, replicas, program_role)
    while pools and not pools[-1]:
        pools.pop()
    job_spec: dict[str, Any] = {"workerPoolSpecs": pools}
    output = cloud_path(t, "output_dir", spec.output_dir, PLATFORM)
    if output:
        job_spec["baseOutputDirectory"] = {"outputUriPrefix": output}
    scheduling = _scheduling(t)
    if scheduling:
        job_spec["scheduling"] = scheduling
    return {"displayName": spec.name, "jobSpec": job_spec}


def _pool(t: Target, role: str, replicas: int, program_role: str) -> dict:
    program = t.program(program_role)
    packages = t.packages.get(program_role)
    container: dict[str, Any] = {"imageUri": program.image}
    if packages:  # a Python package job: the image is the executor that installs and runs them
        container = {"executorImageUri": program.image, "packageUris": list(packages), "pythonModule": program.module}
    command = None if packages else t.command(program)
    own = framework_vars(t, program_role)
    if own and command:
        command = VERTEX_ENTRY + command  # adds from CLUSTER_SPEC the variables Vertex AI does not set
    if command:
        container["command"] = command
    if program.args:
        container["args"] = list(program.args)
    env = {**own, **(program.env or {})}
    if env:
        container["env"] = env_list(env)
    machine = t.machine_keys(role, program.machine, (*_MACHINE_SPEC, *_DISK_SPEC), PLATFORM)
    machine_spec = {_MACHINE_SPEC[k]: v for k, v in machine.items() if k in _MACHINE_SPEC}
    if "machineType" not in machine_spec:
        machine_spec["machineType"] = DEFAULT_MACHINE_TYPE
        t.notes.append(f"pools.{role} has no machine.machine_type; Vertex AI needs one: {DEFAULT_MACHINE_TYPE}")
    pool: dict[str, Any] = {"machineSpec": machine_spec, "replicaCount": replicas,
                            ("pythonPackageSpec" if packages else "containerSpec"): container}
    disk = {_DISK_SPEC[k]: v for k, v in machine.items() if k in _DISK_SPEC}
    if disk:
        pool["diskSpec"] = disk
    return pool


def _scheduling(t: Target) -> dict:
    policy = t.spec.run_policy
    out: dict[str, Any] = {}
    if policy.active_deadline is not None:
        out["timeout"] = f"{seconds(policy.active_deadline)}s"
    if policy.restart_policy == "Never":
        out["disableRetries"] = True
    else:
        out["restartJobOnWorkerRestart"] = True  # a local job restarts its whole group too
    t.google_run_policy("Vertex AI", "chief", restart_policies=("Never", "ExitCode"))
    return out
