"""Load a job spec file: YAML -> overrides -> strict validation -> checks against the disk.

Every problem becomes one :class:`SpecError` naming the file, the field and the fix.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.util
import logging
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from multiworker.errors import SpecError
from multiworker.spec.model import ROLES, JobSpec, PoolSpec, RunPolicy

__all__ = ["LoadedSpec", "load_spec", "read_yaml", "spec_from_dict", "apply_overrides", "check_programs"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with where it came from: paths in it resolve against ``base_dir``."""

    spec: JobSpec
    path: Path | None
    base_dir: Path
    format: str = "native"
    notes: tuple[str, ...] = ()

    @property
    def source(self) -> str:
        return str(self.path) if self.path else "<spec>"

    def resolve(self, relative: str | None) -> Path:
        """A path from the spec, made absolute against the spec's directory."""
        return (self.base_dir / (relative or ".")).resolve()


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML or JSON file; a missing file or bad syntax is a one-line SpecError."""
    path = Path(path)
    if not path.exists():
        raise SpecError("no such file; check the path", source=str(path))
    if path.is_dir():
        raise SpecError("is a directory; give the job's YAML file (e.g. job.yaml)", source=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read it: {exc}", source=str(path)) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{where}invalid YAML: {problem}", source=str(path)) from exc


def apply_overrides(data: dict, overrides: list[str] | tuple[str, ...], *, source: str = "--set") -> dict:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to a copy of ``data``."""
    import copy

    data = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"{item!r} is not KEY=VALUE; write it like pools.worker.replicas=3", source=source)
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        node = data
        parts = key.strip().split(".")
        for part in parts[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise SpecError(f"cannot set {key}: {part} is not a mapping", source=source, field=key)
            node = child
        node[parts[-1]] = value
    return data


def _known_keys(loc: tuple) -> list[str]:
    """Field names allowed at ``loc`` (used for did-you-mean hints)."""
    if loc[:1] == ("pools",):
        return list(ROLES) if len(loc) == 1 else list(PoolSpec.model_fields)
    if loc[:1] == ("run_policy",):
        return list(RunPolicy.model_fields)
    return list(JobSpec.model_fields)


def _format_error(err: dict) -> tuple[str, str]:
    loc = tuple(p for p in err["loc"] if p != "[key]")
    field = ".".join(str(p) for p in loc)
    kind = err["type"]
    if kind == "extra_forbidden":
        unknown = str(loc[-1]) if loc else "?"
        keys = _known_keys(loc[:-1])
        hint = difflib.get_close_matches(unknown, keys, n=1, cutoff=0.6)
        fix = f"did you mean `{hint[0]}`?" if hint else f"allowed keys: {', '.join(keys)}"
        return field, f"unknown key `{unknown}`; {fix}"
    if kind == "literal_error" and len(loc) >= 2 and loc[-2] == "pools":
        hint = difflib.get_close_matches(str(loc[-1]), ROLES, n=1, cutoff=0.5)
        fix = f"did you mean `{hint[0]}`?" if hint else f"roles are {', '.join(ROLES)}"
        return field, f"unknown role `{loc[-1]}`; {fix}"
    if kind == "missing":
        return field, "is required"
    msg = err["msg"]
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return field, msg


def spec_from_dict(data: Any, *, source: str) -> JobSpec:
    """Validate a native spec dict; raise the first problem as a one-line SpecError."""
    if not isinstance(data, dict):
        raise SpecError("a job spec is a YAML mapping with at least `name` and `pools`", source=source)
    try:
        return JobSpec.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        # Prefer the most specific error (deepest location) over a generic parent one.
        err = max(errors, key=lambda e: (e["type"] == "extra_forbidden", len(e["loc"])))
        field, message = _format_error(err)
        raise SpecError(message, source=source, field=field or None) from None


def check_programs(loaded: LoadedSpec) -> None:
    """Every pool's working directory exists and its module can be found there (or is installed)."""
    spec = loaded.spec
    for role in spec.replica_counts():
        program = spec.resolved(role)
        pool_has = spec.pools[role]
        wd_field = f"pools.{role}.working_dir" if pool_has.working_dir is not None else "working_dir"
        workdir = loaded.resolve(program.working_dir)
        if not workdir.is_dir():
            raise SpecError(
                f"directory {workdir} does not exist; fix the path (it is relative to the spec file)",
                source=loaded.source,
                field=wd_field,
            )
        if not program.module and not program.command:
            raise SpecError(
                "no program: set `module` (e.g. trainer.task) or `command` for the job or this pool",
                source=loaded.source,
                field=f"pools.{role}",
            )
        if program.module and not _module_exists(program.module, workdir):
            mod_field = f"pools.{role}.module" if pool_has.module else "module"
            rel = program.module.replace(".", "/")
            raise SpecError(
                f"module {program.module!r} not found: no {rel}.py or {rel}/__init__.py under {workdir}, "
                "and it is not installed; fix `module` or `working_dir`",
                source=loaded.source,
                field=mod_field,
            )


def _module_exists(module: str, workdir: Path) -> bool:
    rel = Path(*module.split("."))
    candidates = (workdir / rel.with_suffix(".py"), workdir / rel / "__init__.py", workdir / rel / "__main__.py")
    if any(c.is_file() for c in candidates):
        return True
    try:
        return importlib.util.find_spec(module.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def load_spec(path: str | Path, *, overrides: tuple[str, ...] | list[str] = (), check: bool = True) -> LoadedSpec:
    """Load a native spec file, apply ``--set`` overrides and validate it fully."""
    path = Path(path)
    data = read_yaml(path)
    if isinstance(data, dict) and overrides:
        data = apply_overrides(data, overrides)
    spec = spec_from_dict(data, source=str(path))
    loaded = LoadedSpec(spec=spec, path=path, base_dir=path.resolve().parent)
    if check:
        check_programs(loaded)
    return loaded
