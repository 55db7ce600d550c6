"""Shared pieces of the format parsers: strict models, one-line errors, and the parse result."""

from __future__ import annotations

import dataclasses
import difflib
import re
import typing
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, ValidationError
from pydantic.alias_generators import to_camel, to_snake

from multiworker.errors import SpecError

__all__ = [
    "CamelModel",
    "Str",
    "Many",
    "Parsed",
    "KINDS",
    "LOSSY_KINDS",
    "validate",
    "unknown_key",
    "job_name",
    "program_of",
    "finish",
]

# Kinds of cloud settings that do not apply locally, for one note per kind.
KINDS: dict[str, str] = {
    "machine": "machine types, accelerators and disks",
    "network": "network, identity and encryption settings",
    "storage": "volume and storage mounts",
    "scheduling": "scheduling and placement settings",
    "lifecycle": "cleanup and lifecycle settings",
    "container": "container runtime settings",
    "tracking": "experiment tracking, dashboards and labels",
    "runtime": "managed runtime and region settings",
    "metadata": "Kubernetes namespace, labels and annotations",
}
# Kinds whose loss changes what the program sees (data, identity, code, environment): converting
# refuses to drop them without --allow-loss. The other kinds are bookkeeping and only noted.
LOSSY_KINDS = ("storage", "network", "container", "runtime")


def _scalar_to_str(value: Any) -> Any:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, (int, float)):
        return str(value)
    return value


# A string that also accepts YAML numbers and booleans (`- 5` in an args list).
Str = Annotated[str, BeforeValidator(_scalar_to_str)]

T = typing.TypeVar("T")
M = typing.TypeVar("M", bound=BaseModel)


def _one_to_list(value: Any) -> Any:
    return value if value is None or isinstance(value, list) else [value]


# A repeated field that also takes one item, as gcloud reads --config files (apitools' protojson wraps
# a lone value of a repeated field in a list): `workerPoolSpecs: {machineSpec: ...}`, `args: --epochs=2`.
Many = Annotated[list[T], BeforeValidator(_one_to_list)]


class CamelModel(BaseModel):
    """A cloud object: camelCase keys (snake_case accepted too), unknown keys are errors."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, validate_by_name=True, validate_by_alias=True
    )


@dataclasses.dataclass
class Parsed:
    """A cloud job read into a native spec dict, with what it could not carry and where things came from.

    ``kept``: (kind, field) settings kept in the native dict (pools.*.machine) that do not apply locally.
    ``dropped``: (kind, field) settings with no native home: noted when running, an error when converting.
    ``origins``: native location (``pools.worker.args``, ``output_dir``, ...) -> field in the source file.
    ``packages``: role -> [(package uri, source field)] for Python package jobs.
    ``workdirs``: role -> (container working directory, source field), for a Dockerfile mapping.
    ``conflicts``: (field, message) meanings the native spec cannot hold exactly; an error when converting.
    """

    format: str
    native: dict
    kept: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    dropped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    origins: dict[str, str] = dataclasses.field(default_factory=dict)
    packages: dict[str, list[tuple[str, str]]] = dataclasses.field(default_factory=dict)
    workdirs: dict[str, tuple[str, str]] = dataclasses.field(default_factory=dict)
    conflicts: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)

    def drop(self, kind: str, field: str) -> None:
        self.dropped.append((kind, field))

    def keep(self, kind: str, field: str) -> None:
        self.kept.append((kind, field))

    def all_notes(self) -> list[str]:
        """One note per kind of setting that does not apply locally, then the parser's own notes."""
        out: list[str] = []
        for kind, text in KINDS.items():
            kept = [f for k, f in self.kept if k == kind]
            dropped = [f for k, f in self.dropped if k == kind]
            if kept:
                out.append(f"{text} do not apply locally (kept for conversions): {_fields(kept)}")
            if dropped:
                out.append(f"{text} do not apply locally: {_fields(dropped)}")
        return out + self.notes


def _fields(fields: list[str], limit: int = 6) -> str:
    unique = list(dict.fromkeys(fields))
    more = f" and {len(unique) - limit} more" if len(unique) > limit else ""
    return ", ".join(unique[:limit]) + more


# -- validation ---------------------------------------------------------------------


def _path(parts: typing.Iterable[Any], prefix: str = "") -> str:
    out = prefix
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _unwrap(annotation: Any) -> Any:
    """The model, list or dict type inside Optional/Annotated wrappers."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = args[0] if args else annotation
            if len(args) <= 1:
                continue
            return annotation
        else:
            return annotation


def _model_at(model: type[BaseModel], loc: tuple) -> type[BaseModel] | None:
    """The model class that validates the object at ``loc`` below ``model``."""
    current: Any = model
    for part in loc:
        current = _unwrap(current)
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = next(
                (f for name, f in current.model_fields.items() if part in (name, f.alias)),
                None,
            )
            if field is None:
                return None
            current = field.annotation
        elif typing.get_origin(current) is list and isinstance(part, int):
            current = typing.get_args(current)[0]
        elif typing.get_origin(current) is dict:
            current = typing.get_args(current)[1]
        else:
            return None
    current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def keys_of(model: type[BaseModel], style: str = "camel") -> list[str]:
    """A model's keys as the file spells them."""
    names = [f.alias or n for n, f in model.model_fields.items()]
    return [to_snake(n) for n in names] if style == "snake" else names


def unknown_key(key: str, allowed: typing.Iterable[str], *, source: str, field: str | None) -> SpecError:
    """The error for a key that is not allowed here, with a did-you-mean hint."""
    allowed = list(allowed)
    hint = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if not hint:
        lowered = {a.lower(): a for a in allowed}
        hint = [lowered[key.lower()]] if key.lower() in lowered else []
    fix = f"did you mean `{hint[0]}`?" if hint else f"allowed keys: {', '.join(allowed)}"
    return SpecError(f"unknown key `{key}`; {fix}", source=source, field=field)


def validate(model: type[M], data: Any, *, source: str, prefix: str = "", style: str = "camel") -> M:
    """``model.model_validate(data)``; the most specific problem becomes a one-line SpecError."""
    if not isinstance(data, dict):
        what = "a mapping" if data is not None else "a mapping, not empty"
        raise SpecError(f"must be {what}", source=source, field=prefix or None)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        err = max(exc.errors(), key=lambda e: (e["type"] == "extra_forbidden", len(e["loc"])))
    loc = tuple(err["loc"])
    field = _path(loc, prefix) or None
    if err["type"] == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        allowed = keys_of(parent, style) if parent else []
        raise unknown_key(str(loc[-1]), allowed, source=source, field=field)
    if err["type"] == "missing":
        name = to_snake(str(loc[-1])) if style == "snake" else str(loc[-1])
        field = _path(loc[:-1] + (name,), prefix)
        raise SpecError("is required", source=source, field=field)
    msg = err["msg"].removeprefix("Value error, ")
    if err["type"] not in ("value_error",) and "input" in err and not isinstance(err["input"], (dict, list)):
        msg += f" (got {err['input']!r})"
    raise SpecError(msg, source=source, field=field)


# -- building the native dict ---------------------------------------------------------

_NAME_BAD = re.compile(r"[^A-Za-z0-9._-]+")


def job_name(name: str | None, path: Path | None) -> str:
    """A valid native job name from a cloud name (or the file's stem)."""
    text = name or (path.stem if path else "") or "job"
    text = _NAME_BAD.sub("-", text).strip("-._") or "job"
    return text[:63]


_PYTHONS = ("python", "python3")


def program_of(command: list[str] | None, args: list[str] | None) -> dict:
    """Native program fields for a container command: `python -m M` becomes ``module: M``."""
    out: dict[str, Any] = {}
    args = list(args or [])
    if command:
        if len(command) >= 3 and command[0] in _PYTHONS and command[1] == "-m":
            out["module"] = command[2]
            args = list(command[3:]) + args
        else:
            out["command"] = list(command)
    out["args"] = args
    return out


_HOISTED = ("image", "args", "env")


def finish(parsed: Parsed, name: str, pools: dict[str, dict], job: dict) -> Parsed:
    """Put pools into the native dict, hoisting what every pool shares to the job level."""
    active = [role for role, p in pools.items() if p.get("replicas", 1)]
    if active:
        first = pools[active[0]]
        program = (first.get("module"), first.get("command"))
        if all((pools[r].get("module"), pools[r].get("command")) == program for r in active):
            for key in ("module", "command"):
                if first.get(key) is not None:
                    job[key] = first[key]
                    _move_origins(parsed, f"pools.{active[0]}.{key}", key)
            for p in pools.values():
                p.pop("module", None)
                p.pop("command", None)
        for key in _HOISTED:
            values = [pools[r].get(key) for r in active]
            if values[0] is not None and all(v == values[0] for v in values):
                if values[0] not in ([], {}):
                    job[key] = values[0]
                _move_origins(parsed, f"pools.{active[0]}.{key}", key)
                for p in pools.values():
                    p.pop(key, None)
    for p in pools.values():
        for key in ("args", "env"):
            if not p.get(key) and key not in job:
                p.pop(key, None)
    native = {"name": name, **job, "pools": pools}
    order = [k for k in _ORDER if k in native] + [k for k in native if k not in _ORDER]
    parsed.native = {k: native[k] for k in order if native[k] is not None}
    return parsed


_ORDER = ("name", "image", "module", "command", "args", "env", "chief_task_type", "output_dir", "pools", "run_policy")


def _move_origins(parsed: Parsed, old: str, new: str) -> None:
    for key in [k for k in parsed.origins if k == old or k.startswith(old + ".")]:
        parsed.origins[new + key[len(old):]] = parsed.origins[key]
