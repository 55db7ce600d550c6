"""AI Platform Training (legacy) ``trainingInput``, as `gcloud ai-platform jobs submit training --config`
takes it: a master, workers, parameter servers and evaluators of scaleTier CUSTOM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic.alias_generators import to_snake

from multiworker.errors import SpecError
from multiworker.spec.formats.common import (
    CamelModel,
    Many,
    Parsed,
    Str,
    finish,
    job_name,
    program_of,
    validate,
)
from multiworker.spec.model import parse_duration

__all__ = ["parse", "TIERS", "SINGLE_MACHINE_TIERS", "JOB_DIR_FLAG"]

# (role, field prefix) in TensorFlow's order; the master is the chief.
TIERS = (("chief", "master"), ("worker", "worker"), ("ps", "parameterServer"), ("evaluator", "evaluator"))
SINGLE_MACHINE_TIERS = ("BASIC", "BASIC_GPU", "BASIC_TPU")
# AI Platform passes jobDir to the program as this flag.
JOB_DIR_FLAG = "--job-dir"


class AcceleratorConfig(CamelModel):
    count: int | None = None
    type: str | None = None


class DiskConfig(CamelModel):
    boot_disk_type: str | None = None
    boot_disk_size_gb: int | None = None


class ReplicaConfig(CamelModel):
    image_uri: str | None = None
    container_command: Many[Str] | None = None
    container_args: Many[Str] | None = None
    accelerator_config: AcceleratorConfig | None = None
    disk_config: DiskConfig | None = None
    tpu_tf_version: str | None = None


class Scheduling(CamelModel):
    max_running_time: str | None = None
    max_wait_time: str | None = None
    priority: int | None = None


class TrainingInput(CamelModel):
    scale_tier: str = "BASIC"
    master_type: str | None = None
    master_config: ReplicaConfig | None = None
    worker_type: str | None = None
    worker_config: ReplicaConfig | None = None
    worker_count: int = 0
    parameter_server_type: str | None = None
    parameter_server_config: ReplicaConfig | None = None
    parameter_server_count: int = 0
    evaluator_type: str | None = None
    evaluator_config: ReplicaConfig | None = None
    evaluator_count: int = 0
    package_uris: Many[str] | None = None
    python_module: str | None = None
    args: Many[Str] | None = None
    job_dir: str | None = None
    use_chief_in_tf_config: bool | None = None
    region: str | None = None
    runtime_version: Str | None = None
    python_version: Str | None = None
    scheduling: Scheduling | None = None
    hyperparameters: dict | None = None
    network: str | None = None
    service_account: str | None = None
    encryption_config: dict | None = None
    enable_web_access: bool | None = None


class Job(CamelModel):
    """The Job resource (`--config` mirrors it); output-only fields are accepted and ignored."""

    job_id: str | None = None
    training_input: TrainingInput
    labels: dict[str, str] | None = None
    etag: str | None = None
    state: str | None = None
    create_time: str | None = None
    start_time: str | None = None
    end_time: str | None = None
    error_message: str | None = None
    training_output: dict | None = None


_DROPPED = (
    ("region", "scheduling"),
    ("runtimeVersion", "runtime"),
    ("pythonVersion", "runtime"),
    ("network", "network"),
    ("serviceAccount", "network"),
    ("encryptionConfig", "network"),
    ("enableWebAccess", "tracking"),
    ("hyperparameters", "tracking"),
)


def parse(data: Any, *, source: str, path: Path | None = None) -> Parsed:
    """Read a trainingInput (top level or under ``trainingInput:``) into a native spec dict."""
    parsed = Parsed(format="aiplatform", native={})
    if isinstance(data, dict) and ("trainingInput" in data or "training_input" in data):
        envelope = validate(Job, data, source=source)
        ti, prefix, name = envelope.training_input, "trainingInput.", envelope.job_id
        if envelope.labels:
            parsed.drop("tracking", "labels")
    else:
        ti, prefix, name = validate(TrainingInput, data, source=source), "", None

    counts = _counts(ti, source=source, prefix=prefix)
    master = ti.master_config or ReplicaConfig()
    container = master.image_uri is not None
    if container and (ti.python_module or ti.package_uris):
        raise SpecError(
            "set either masterConfig.imageUri (a custom container) or pythonModule/packageUris (a Python "
            "package on a runtime version), not both",
            source=source,
            field=f"{prefix}pythonModule" if ti.python_module else f"{prefix}packageUris",
        )
    if not container and not ti.python_module:
        raise SpecError(
            "no program: set masterConfig.imageUri (a custom container) or pythonModule and packageUris",
            source=source,
            field=f"{prefix}pythonModule",
        )
    if not container and not ti.package_uris:
        raise SpecError("is required with pythonModule; list your trainer package", source=source, field=f"{prefix}packageUris")

    pools: dict[str, dict] = {}
    for role, stem in TIERS:
        if not counts[role]:
            continue
        config: ReplicaConfig = getattr(ti, f"{to_snake(stem)}_config") or ReplicaConfig()
        pools[role] = _pool(parsed, ti, role, stem, config, counts[role], master, source=source, prefix=prefix)

    job: dict[str, Any] = {}
    if ti.job_dir:
        job["output_dir"] = ti.job_dir
        parsed.origins["output_dir"] = f"{prefix}jobDir"
        for _role, pool in pools.items():
            pool["args"] = [*pool["args"], f"{JOB_DIR_FLAG}={ti.job_dir}"]
    if not _uses_chief(ti, container):
        job["chief_task_type"] = "master"
    # AI Platform retries after system failures only (a kill, a preemption), never after an error.
    job["run_policy"] = {"restart_policy": "ExitCode"}
    if ti.scheduling:
        if ti.scheduling.max_running_time:
            try:
                job["run_policy"]["active_deadline"] = parse_duration(ti.scheduling.max_running_time)
            except ValueError as exc:
                raise SpecError(str(exc), source=source, field=f"{prefix}scheduling.maxRunningTime") from None
        for key in ("maxWaitTime", "priority"):
            if getattr(ti.scheduling, to_snake(key)) is not None:
                parsed.drop("scheduling", f"{prefix}scheduling.{key}")
    for key, kind in _DROPPED:
        if getattr(ti, to_snake(key)) not in (None, False, {}):
            parsed.drop(kind, f"{prefix}{key}")
    if ti.hyperparameters:
        parsed.notes.append(f"{prefix}hyperparameters: tuning is not run locally; the job runs once with its args")
    return finish(parsed, job_name(name, path), pools, job)


def _counts(ti: TrainingInput, *, source: str, prefix: str) -> dict[str, int]:
    tier = ti.scale_tier.upper()
    custom = {"worker": ti.worker_count, "ps": ti.parameter_server_count, "evaluator": ti.evaluator_count}
    if tier in SINGLE_MACHINE_TIERS:
        extra = [f"{stem}Count" for role, stem in TIERS[1:] if custom[role]] + (["masterType"] if ti.master_type else [])
        if extra:
            raise SpecError(
                f"{extra[0]} needs scaleTier: CUSTOM (scaleTier {ti.scale_tier} is a single machine)",
                source=source,
                field=f"{prefix}{extra[0]}",
            )
        return {"chief": 1, "worker": 0, "ps": 0, "evaluator": 0}
    if tier != "CUSTOM":
        raise SpecError(
            f"scaleTier {ti.scale_tier} has no fixed replica counts; use scaleTier: CUSTOM with masterType, "
            "workerType/workerCount and parameterServerType/parameterServerCount",
            source=source,
            field=f"{prefix}scaleTier",
        )
    if not ti.master_type:
        raise SpecError("is required with scaleTier: CUSTOM, e.g. masterType: n1-standard-4", source=source, field=f"{prefix}masterType")
    for role, stem in TIERS[1:]:
        count = custom[role]
        if count < 0:
            raise SpecError(f"is {count}; it must be 0 or more", source=source, field=f"{prefix}{stem}Count")
        if count and not getattr(ti, f"{to_snake(stem)}_type"):
            raise SpecError(
                f"is required when {stem}Count is {count}, e.g. {stem}Type: {ti.master_type}",
                source=source,
                field=f"{prefix}{stem}Type",
            )
    if ti.evaluator_count > 1:
        raise SpecError(
            f"is {ti.evaluator_count}; TensorFlow runs at most one evaluator", source=source, field=f"{prefix}evaluatorCount"
        )
    return {"chief": 1, **custom}


def _pool(parsed: Parsed, ti: TrainingInput, role: str, stem: str, config: ReplicaConfig, replicas: int,
          master: ReplicaConfig, *, source: str, prefix: str) -> dict:
    where = f"{prefix}{stem}Config"
    if (config.container_command or config.container_args) and ti.args:
        raise SpecError(
            "args and containerCommand/containerArgs cannot both be set (AI Platform rejects it); "
            f"move args into {stem}Config.containerArgs",
            source=source,
            field=f"{prefix}args",
        )
    out: dict[str, Any] = {"replicas": replicas}
    image = config.image_uri or master.image_uri
    if image:
        out["image"] = image
        if config.container_command or config.container_args:
            out.update(program_of(config.container_command, config.container_args))
            parsed.origins[f"pools.{role}.args"] = f"{where}.containerArgs"
            if config.container_command and "module" not in out:
                parsed.origins[f"pools.{role}.command"] = f"{where}.containerCommand"
        else:
            out["args"] = list(ti.args or [])
            parsed.origins[f"pools.{role}.args"] = f"{prefix}args"
    else:
        out["module"] = ti.python_module
        out["args"] = list(ti.args or [])
        parsed.origins[f"pools.{role}.args"] = f"{prefix}args"
        uris = ti.package_uris or []
        parsed.packages[role] = [(uri, f"{prefix}packageUris[{j}]") for j, uri in enumerate(uris)]
    machine: dict[str, Any] = {}
    if ti.scale_tier.upper() in SINGLE_MACHINE_TIERS:
        machine["scale_tier"] = ti.scale_tier.upper()
    else:
        machine["machine_type"] = getattr(ti, f"{to_snake(stem)}_type")
        parsed.keep("machine", f"{prefix}{stem}Type")
    if config.accelerator_config:
        if config.accelerator_config.type:
            machine["accelerator_type"] = config.accelerator_config.type
        if config.accelerator_config.count is not None:
            machine["accelerator_count"] = config.accelerator_config.count
    if config.disk_config:
        if config.disk_config.boot_disk_type:
            machine["boot_disk_type"] = config.disk_config.boot_disk_type
        if config.disk_config.boot_disk_size_gb is not None:
            machine["boot_disk_size_gb"] = config.disk_config.boot_disk_size_gb
    if config.tpu_tf_version:
        machine["tpu_tf_version"] = config.tpu_tf_version
    out["machine"] = machine
    if config.accelerator_config or config.disk_config:
        parsed.keep("machine", where)
    return out


def _uses_chief(ti: TrainingInput, container: bool) -> bool:
    """Custom containers follow useChiefInTfConfig; runtime versions 2.1 and later say `chief`."""
    if container:
        return bool(ti.use_chief_in_tf_config)
    try:
        major, minor = (int(p) for p in str(ti.runtime_version or "1.15").split(".")[:2])
    except ValueError:
        return bool(ti.use_chief_in_tf_config)
    return (major, minor) >= (2, 1) or bool(ti.use_chief_in_tf_config)
