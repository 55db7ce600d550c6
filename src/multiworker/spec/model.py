"""The native job spec: desired state, validated strictly, immutable once loaded."""

from __future__ import annotations

import re
import shlex
from typing import Literal, TypeGuard

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "ROLES",
    "Role",
    "Framework",
    "Program",
    "PoolSpec",
    "RunPolicy",
    "JobSpec",
    "is_role",
    "parse_duration",
    "format_duration",
]

ROLES: tuple[str, ...] = ("chief", "worker", "ps", "evaluator")
Role = Literal["chief", "worker", "ps", "evaluator"]


def is_role(name: str) -> TypeGuard[Role]:
    """Whether ``name`` is one of ROLES."""
    return name in ROLES


Framework = Literal["tensorflow", "jax", "pytorch"]
RestartPolicy = Literal["Never", "OnFailure", "ExitCode", "Always"]
SuccessPolicy = Literal["chief", "all_workers"]

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: str | int | float) -> float:
    """Seconds in ``"90s"``, ``"30m"``, ``"1h30m"``, ``"2d"`` or a plain number of seconds."""
    if isinstance(value, bool):
        raise ValueError("a duration is a number of seconds or a string such as '30m'")
    if isinstance(value, (int, float)):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"duration {value} is not a finite number of seconds; write it like '90s' or '30m'")
        if value < 0:
            raise ValueError(f"duration {value} is negative")
        return float(value)
    text = str(value).strip().lower()
    try:
        seconds = float(text)
        if seconds != seconds or seconds in (float("inf"), float("-inf")):
            raise ValueError(f"duration {value!r} is not a finite number of seconds; write it like '90s' or '30m'")
    except ValueError as exc:
        if "finite" in str(exc):
            raise
        pos, seconds = 0, 0.0
        for match in _DURATION.finditer(text):
            if match.start() != pos or (match.start() > 0 and text[match.start() - 1].isdigit()):
                break
            seconds += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
            pos = match.end()
        if pos == 0 or pos != len(text):
            raise ValueError(f"{value!r} is not a duration; write it like '90s', '30m', '1h30m' or '2d'") from None
    if seconds < 0:
        raise ValueError(f"duration {value!r} is negative")
    return seconds


def format_duration(seconds: float) -> str:
    """Compact human form: 5400 -> '1h30m'."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            out += f"{n}{unit}"
    return out


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class _ProgramFields(_Strict):
    """The checks of the program fields (command, args, env) that a pool and the job's defaults share."""

    @field_validator("command", mode="before", check_fields=False)
    @classmethod
    def _split_command(cls, value):
        if isinstance(value, str):
            return shlex.split(value)
        return value

    @field_validator("args", mode="before", check_fields=False)
    @classmethod
    def _stringify_args(cls, value):
        if isinstance(value, str):
            return shlex.split(value)
        if isinstance(value, list):
            return [v if isinstance(v, str) else str(v) for v in value]
        return value

    @field_validator("env", mode="before", check_fields=False)
    @classmethod
    def _stringify_env(cls, value):
        if isinstance(value, dict):
            return {str(k): ("" if v is None else v if isinstance(v, (dict, list)) else
                             (str(v).lower() if isinstance(v, bool) else str(v))) for k, v in value.items()}
        return value

    @field_validator("env", check_fields=False)
    @classmethod
    def _valid_env(cls, value):
        for name, val in (value or {}).items():
            if not name or "=" in name or "\0" in name:
                raise ValueError(f"environment variable name {name!r} is not allowed: a name has no '=' and no NUL")
            if "\0" in val:
                raise ValueError(f"environment variable {name}: the value contains a NUL byte, which no process can receive")
        return value

    @field_validator("command", "args", check_fields=False)
    @classmethod
    def _no_nul(cls, value):
        if value and any("\0" in v for v in value):
            raise ValueError("contains a NUL byte, which no process can receive")
        return value


class Program(_ProgramFields):
    """What a replica runs: a Python module (``python -m``) or a command, with args and env."""

    module: str | None = Field(None, description="Python module run as `python -m MODULE`, e.g. trainer.task.")
    command: list[str] | None = Field(
        None, description="A command to run instead of a module (a list, or a string split like a shell)."
    )
    working_dir: str | None = Field(None, description="Directory the replica runs in, relative to the spec file.")
    python: str | None = Field(None, description="Interpreter for `module`; default: the one running multiworker.")
    args: list[str] | None = Field(None, description="Arguments given to the program.")
    env: dict[str, str] | None = Field(None, description="Extra environment variables.")
    image: str | None = Field(None, description="Container image for cloud backends (ignored locally).")
    machine: dict[str, str | int] | None = Field(
        None,
        description="Cloud machine settings kept for conversions (machine_type, accelerator_type, "
        "accelerator_count, boot_disk_type, boot_disk_size_gb); not applied locally.",
    )

    @model_validator(mode="after")
    def _one_program(self):
        if self.module and self.command:
            raise ValueError("set either `module` or `command`, not both")
        return self


class PoolSpec(Program):
    """One pool of identical replicas of a role; unset fields inherit the job's defaults."""

    replicas: int = Field(1, strict=True, description="Number of replicas in this pool (0 disables the pool).")

    @field_validator("replicas")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"replicas is {value}; it must be 0 or more")
        return value


class RunPolicy(_Strict):
    """How failures are retried and when the job ends (Kubeflow TFJob meanings)."""

    restart_policy: RestartPolicy = Field(
        "OnFailure",
        description="Never | OnFailure | ExitCode (retry exit codes >= 128, i.e. signals; fail on 1-127) | Always.",
    )
    backoff_limit: int = Field(3, ge=0, description="Group restarts allowed before the job fails.")
    backoff: float = Field(2.0, description="First restart delay (seconds or '2s'); it doubles each restart, up to 60s.")
    active_deadline: float | None = Field(None, description="Wall-clock limit for the whole job, e.g. '30m'.")
    success_policy: SuccessPolicy = Field(
        "chief", description="chief: the chief (worker 0 without a chief) decides; all_workers: every worker must succeed."
    )
    grace_period: float = Field(10.0, description="Seconds between SIGTERM and SIGKILL when stopping replicas.")
    evaluator_timeout: float = Field(
        300.0, description="After success, how long an evaluator may take to finish its last evaluation."
    )
    hang_timeout: float | None = Field(
        None, description="When no replica has printed or advanced for this long (e.g. '60s'), the job is hung: "
        "every replica's Python stack is saved and the group restarts as after a failure. Default: derived from "
        "the job's own pace once training reports steps (20x its longest quiet stretch, at least 120s); 0: off."
    )

    @field_validator("backoff", "active_deadline", "grace_period", "evaluator_timeout", "hang_timeout", mode="before")
    @classmethod
    def _duration(cls, value):
        return None if value is None else parse_duration(value)


class JobSpec(_ProgramFields):
    """A distributed training job: pools of replicas by role, the program they run and the run policy."""

    name: str = Field(..., description="Job name (letters, digits, '-', '_', '.').")
    module: str | None = Field(None, description="Default Python module for every pool.")
    command: list[str] | None = Field(None, description="Default command for every pool (instead of `module`).")
    working_dir: str | None = Field(None, description="Default working directory, relative to the spec file.")
    python: str | None = Field(None, description="Default interpreter for `module`.")
    args: list[str] | None = Field(None, description="Default arguments for every pool.")
    env: dict[str, str] | None = Field(None, description="Environment for every pool (a pool's env is merged over it).")
    image: str | None = Field(None, description="Default container image for cloud backends (ignored locally).")
    chief_task_type: Literal["chief", "master"] = Field(
        "chief", description="Task type the chief gets in TF_CONFIG: `master` for TF 1 style AI Platform jobs."
    )
    framework: Framework = Field(
        "tensorflow", description="What the replicas train with: tensorflow (TF_CONFIG), jax (JAX_COORDINATOR_ADDRESS, "
        "JAX_NUM_PROCESSES, JAX_PROCESS_ID and Keras' KERAS_DISTRIBUTION_*) or pytorch (MASTER_ADDR, MASTER_PORT, "
        "WORLD_SIZE, RANK, LOCAL_RANK; torchrun's PET_*). Written, never inferred from the program."
    )
    pools: dict[Role, PoolSpec] = Field(..., description="Pools by role: chief, worker, ps, evaluator.")
    run_policy: RunPolicy = Field(default_factory=RunPolicy)
    output_dir: str | None = Field(
        None, description="Where model/, checkpoints/, logs/ and metrics.json go (relative to the spec file). "
        "Default: MULTIWORKER_HOME/jobs/<id>/output."
    )
    threads_per_replica: int | None = Field(
        None, ge=1, description="CPU threads per replica; default: cores divided among replicas."
    )
    placement: Literal["spread", "strict_spread", "pack"] | None = Field(
        None, description="Ray backend: how replicas spread over the cluster's nodes (a placement group "
        "strategy): `spread` (default, a one-node cluster works), `strict_spread` (one replica per node), `pack`."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}", value):
            raise ValueError(f"name {value!r} must be 1-63 letters, digits, '.', '_' or '-', starting with a letter or digit")
        return value

    @model_validator(mode="after")
    def _topology(self):
        counts = self.replica_counts()
        if self.module and self.command:
            raise ValueError("set either `module` or `command`, not both")
        if counts.get("chief", 0) > 1:
            raise ValueError(
                f"pools.chief.replicas is {counts['chief']}; a job has at most one chief. "
                "Set it to 1 or move the extra replicas to `worker`."
            )
        if counts.get("chief", 0) + counts.get("worker", 0) == 0:
            raise ValueError("the job has no chief and no worker; add `pools.worker.replicas: 1` or more")
        if counts.get("ps", 0) and not counts.get("chief", 0):
            raise ValueError(
                "pools.ps needs a chief: ParameterServerStrategy's coordinator runs on the chief. "
                "Add `chief: {replicas: 1}` to pools."
            )
        if self.framework != "tensorflow":
            for role in ("ps", "evaluator"):
                if counts.get(role):
                    raise ValueError(
                        f"pools.{role}: a {self.framework} job's processes are a chief and workers, with no "
                        f"{'parameter servers' if role == 'ps' else 'evaluator'}; remove pools.{role} or set "
                        "`framework: tensorflow`"
                    )
        if counts.get("evaluator", 0) > 1:
            raise ValueError(f"pools.evaluator.replicas is {counts['evaluator']}; TensorFlow runs at most one evaluator")
        return self

    # -- derived views --------------------------------------------------------------
    def replica_counts(self) -> dict[str, int]:
        """Replicas per role, in TensorFlow's order, omitting empty pools."""
        return {role: self.pools[role].replicas for role in ROLES if role in self.pools and self.pools[role].replicas}

    def pool(self, role: str) -> PoolSpec:
        """The pool of ``role`` (KeyError if the job has none)."""
        if not is_role(role):
            raise KeyError(role)
        return self.pools[role]

    def resolved(self, role: str) -> Program:
        """The program a pool runs: its own fields over the job's defaults (env merged).

        The one place pool-over-job inheritance is decided; ``localize`` and the writers use it too.
        """
        pool = self.pool(role)
        module, command = pool.module, pool.command
        if module is None and command is None:
            module, command = self.module, self.command
        env = dict(self.env or {})
        env.update(pool.env or {})
        return Program(
            module=module,
            command=command,
            working_dir=pool.working_dir if pool.working_dir is not None else self.working_dir,
            python=pool.python or self.python,
            args=list(pool.args if pool.args is not None else (self.args or [])),
            env=env,
            image=pool.image or self.image,
            machine=pool.machine,
        )

    @property
    def total_replicas(self) -> int:
        return sum(self.replica_counts().values())
