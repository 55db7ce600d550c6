"""Native spec -> AI Platform Training ``trainingInput`` (custom containers, scaleTier CUSTOM)."""

from __future__ import annotations

import re
from typing import Any

from multiworker.spec.formats.aiplatform.reader import (
    JOB_DIR_FLAG,
    SINGLE_MACHINE_TIERS,
    TIERS,
)
from multiworker.spec.formats.target import (
    DEFAULT_MACHINE_TYPE,
    Target,
    cloud_path,
    safe_name,
    seconds,
)
from multiworker.spec.model import Program

__all__ = ["write"]

PLATFORM = "AI Platform"
_MACHINE = ("machine_type", "accelerator_type", "accelerator_count", "boot_disk_type", "boot_disk_size_gb",
            "tpu_tf_version", "scale_tier")


def write(t: Target) -> dict:
    spec = t.spec
    roles = t.roles(PLATFORM, "master")
    job_dir = _job_dir(t, [r for _, _, r in roles])
    programs: dict[str, tuple[Program, list[str] | None, list[str], int]] = {}
    for role, replicas, program_role in roles:
        program = t.program(program_role)
        if program.env:
            t.lose(f"pools.{program_role}.env" if spec.pool(program_role).env else "env",
                   "AI Platform Training cannot set environment variables")
        args = list(program.args or [])
        stripped = _strip_job_dir(args, job_dir)  # never None: job_dir is set only when every pool passes it
        args = args if stripped is None else stripped
        programs[role] = (program, t.command(program), args, replicas)
    ti: dict[str, Any] = {"scaleTier": "CUSTOM"}
    if t.packages:
        _package_job(t, ti, programs)
    master_image = None if t.packages else programs["chief"][0].image
    shared_args = {tuple(a) for _, c, a, _ in programs.values() if not c or t.packages}
    use_shared = len(shared_args) == 1 and (bool(t.packages) or all(not c for _, c, _, _ in programs.values()))
    for role, stem in TIERS:
        if role not in programs:
            continue
        program, command, args, replicas = programs[role]
        machine = t.machine_keys(role, program.machine, _MACHINE, PLATFORM)
        if machine.get("scale_tier"):
            _single_tier(t, ti, role, machine["scale_tier"], len(programs))
        else:
            if "machine_type" not in machine:
                t.notes.append(f"pools.{role} has no machine.machine_type; AI Platform needs one: {DEFAULT_MACHINE_TYPE}")
            ti[f"{stem}Type"] = machine.get("machine_type", DEFAULT_MACHINE_TYPE)
        if role != "chief":
            ti[f"{stem}Count"] = replicas
        config = _config(None if t.packages else program.image, master_image, role,
                         None if t.packages else command, [] if use_shared else args, machine)
        if config:
            ti[f"{stem}Config"] = config
    if use_shared and shared_args != {()}:
        ti["args"] = list(next(iter(shared_args)))
    if job_dir:
        ti["jobDir"] = job_dir
    ti["useChiefInTfConfig"] = spec.chief_task_type == "chief"
    _scheduling(t, ti)
    name = safe_name(spec.name, r"[A-Za-z][A-Za-z0-9_]*", _job_id, t, PLATFORM)
    return {"jobId": name, "trainingInput": ti}


def _package_job(t: Target, ti: dict, programs: dict) -> None:
    """A Python package job: one module and one set of packages for every pool, run on a runtime
    version (AI Platform installs the packages; there is no image)."""
    uris = {tuple(t.packages.get(r, ())) for r in t.packages}
    modules = {p.module for p, _, _, _ in programs.values()}
    args = {tuple(a) for _, _, a, _ in programs.values()}
    if len(uris) > 1 or len(modules) > 1 or len(args) > 1 or len(t.packages) < len({r for r in t.spec.pools}):
        t.lose("pools", "AI Platform runs one module from one set of packageUris, with the same args, in every pool; "
                        "make the pools' programs the same")
    ti["pythonModule"] = next(iter(modules))
    ti["packageUris"] = list(next(iter(uris)))
    ti["runtimeVersion"], ti["pythonVersion"] = "2.11", "3.7"
    images = sorted({p.image for p, _, _, _ in programs.values() if p.image})
    t.notes.append("a Python package job runs on an AI Platform runtime version, not an executor image: wrote "
                   "runtimeVersion 2.11 (TensorFlow 2.11, the last) and pythonVersion 3.7"
                   + (f" in place of {', '.join(images)}" if images else ""))


def _config(image: str | None, master_image: str | None, role: str, command: list[str] | None, args: list[str],
            machine: dict) -> dict:
    config: dict[str, Any] = {}
    if image and (role == "chief" or image != master_image):
        config["imageUri"] = image
    if command:
        config["containerCommand"] = command
    if args:
        config["containerArgs"] = args
    accel = {k: machine[f"accelerator_{k}"] for k in ("type", "count") if f"accelerator_{k}" in machine}
    if accel:
        config["acceleratorConfig"] = accel
    disk = {c: machine[k] for k, c in (("boot_disk_type", "bootDiskType"), ("boot_disk_size_gb", "bootDiskSizeGb"))
            if k in machine}
    if disk:
        config["diskConfig"] = disk
    if "tpu_tf_version" in machine:
        config["tpuTfVersion"] = machine["tpu_tf_version"]
    return config


def _single_tier(t: Target, ti: dict, role: str, tier: str, pools: int) -> None:
    if role != "chief" or pools > 1 or tier not in SINGLE_MACHINE_TIERS:
        t.lose(f"pools.{role}.machine.scale_tier", f"scaleTier {tier} is a single machine; use machine_type instead")
        return
    ti["scaleTier"] = tier


def _job_dir(t: Target, roles: list[str]) -> str | None:
    """AI Platform's jobDir reaches the program only as --job-dir=DIR, so output_dir needs that arg."""
    out = t.spec.output_dir
    if out is None:
        return None
    missing = [r for r in dict.fromkeys(roles) if _strip_job_dir(list(t.spec.resolved(r).args or []), out) is None]
    if missing:
        t.lose("output_dir", f"AI Platform gives the output directory to the program only as {JOB_DIR_FLAG}={out}; "
                             f"add that to the args of pools.{missing[0]} (the trainer must accept it)")
        return None
    return cloud_path(t, "output_dir", out, PLATFORM)


def _strip_job_dir(args: list[str], job_dir: str | None) -> list[str] | None:
    """``args`` without the trailing --job-dir that AI Platform adds; None if it is not there."""
    if job_dir is None:
        return args
    if args[-1:] == [f"{JOB_DIR_FLAG}={job_dir}"]:
        return args[:-1]
    if args[-2:] == [JOB_DIR_FLAG, job_dir]:
        return args[:-2]
    return None


def _scheduling(t: Target, ti: dict) -> None:
    policy = t.spec.run_policy
    if policy.active_deadline is not None:
        ti["scheduling"] = {"maxRunningTime": f"{seconds(policy.active_deadline)}s"}
    t.google_run_policy("AI Platform", "master", restart_policies=("ExitCode",))


def _job_id(name: str) -> str:
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if out[:1].isalpha() else f"job_{out}"
