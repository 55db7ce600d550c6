"""Load a job spec file: YAML -> overrides -> strict validation -> checks against the disk.

Every problem becomes one :class:`SpecError` naming the file, the field and the fix.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib.util
import logging
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from multiworker.errors import SpecError
from multiworker.spec.model import ROLES, JobSpec, PoolSpec, RunPolicy

__all__ = ["LoadedSpec", "load_spec", "read_yaml", "parse_yaml_text", "read_text_capped", "spec_from_dict", "apply_overrides",
           "check_programs", "check_output_dir", "check_replica_cap", "DEFAULT_MAX_REPLICAS"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class LoadedSpec:
    """A validated spec with where it came from: paths in it resolve against ``base_dir``."""

    spec: JobSpec
    path: Path | None
    base_dir: Path
    format: str = "native"
    notes: tuple[str, ...] = ()
    map_paths: tuple[str, ...] = ()  # --map-path as gs://BUCKET[/PREFIX]=/absolute/dir, for the storage stand-in

    @property
    def source(self) -> str:
        return str(self.path) if self.path else "<spec>"

    def resolve(self, relative: str | None) -> Path:
        """A path from the spec, made absolute against the spec's directory."""
        return (self.base_dir / (relative or ".")).resolve()


# Limits on what a spec file may be: a job spec is a few KB; these stop hostile or mistaken input
# (an alias bomb, /dev/zero, 20,000-deep nesting) before it costs seconds or memory.
MAX_SPEC_BYTES = 4 << 20
MAX_DEPTH = 64
MAX_EXPANDED_NODES = 200_000
# Replicas per job unless --max-replicas says otherwise (each local replica costs a process and fds).
DEFAULT_MAX_REPLICAS = 256


class _SpecLoader(yaml.SafeLoader):
    """PyYAML's safe loader that refuses duplicate keys, deep nesting and alias expansion bombs."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                mark = self.peek_event().start_mark
                raise _Refused(f"line {mark.line + 1}: nested more than {MAX_DEPTH} levels deep; flatten it")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:  # unhashable key: let PyYAML say so
                break
            line = key_node.start_mark.line + 1
            if duplicate:
                raise _Refused(f"line {line}: duplicate key `{key}` (first at line {seen[key]}); keep one of them")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


class _Refused(Exception):
    """A YAML document refused by :class:`_SpecLoader` (message is the one-line reason)."""


def _expanded_size(root) -> int:
    """Nodes the document expands to, aliases counted each time they are used (memoized, no recursion)."""
    sizes: dict[int, int] = {}
    stack = [(root, False)]
    while stack:
        node, ready = stack.pop()
        if id(node) in sizes:
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            continue
        children = [c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode) else list(node.value)
        if ready:
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            if sizes[id(node)] > MAX_EXPANDED_NODES:
                return sizes[id(node)]
        else:
            stack.append((node, True))
            stack.extend((c, False) for c in children if id(c) not in sizes)
    return sizes[id(root)]


def parse_yaml_text(text: str, *, source: str) -> Any:
    """Parse YAML (or JSON) text with the limits above; every problem is a one-line SpecError."""
    loader = None
    try:
        loader = _SpecLoader(text)
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node) > MAX_EXPANDED_NODES:
            raise _Refused(f"aliases expand to more than {MAX_EXPANDED_NODES:,} nodes; write the values out")
        return loader.construct_document(node)
    except _Refused as exc:
        raise SpecError(f"invalid YAML: {exc}", source=source) from None
    except RecursionError:
        raise SpecError("invalid YAML: nested too deeply; flatten it", source=source) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(f"{where}invalid YAML: {problem}", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()


def read_text_capped(path: str | Path, *, what: str = "the job's YAML file (e.g. job.yaml)") -> str:
    """A regular text file's contents, at most MAX_SPEC_BYTES; anything else is a one-line SpecError."""
    path = Path(path)
    if not path.exists():
        raise SpecError("no such file; check the path", source=str(path))
    if path.is_dir():
        raise SpecError(f"is a directory; give {what}", source=str(path))
    if not path.is_file():
        raise SpecError(f"is not a regular file; give {what}", source=str(path))
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"cannot read it: {exc.strerror or exc}", source=str(path)) from None
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(f"is larger than {MAX_SPEC_BYTES >> 20} MiB; a job spec is a small YAML file", source=str(path))
    if b"\0" in data:
        raise SpecError(f"is a binary file, not text; give {what}", source=str(path))
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"is not UTF-8 text (byte {exc.start}); save it as UTF-8", source=str(path)) from None


def read_yaml(path: str | Path) -> Any:
    """Parse a YAML or JSON file; a missing file, bad syntax or a hostile document is a one-line SpecError."""
    return parse_yaml_text(read_text_capped(path), source=str(path))


def apply_overrides(data: dict, overrides: Iterable[str], *, source: str = "--set") -> dict:
    """Apply ``a.b.c=value`` overrides (value parsed as YAML) to a copy of ``data``."""
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


def _format_error(err: ErrorDetails) -> tuple[str, str]:
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


def check_programs(loaded: LoadedSpec, *, archives_checked: bool = False) -> None:
    """Every pool's working directory exists and its module can be found there (or is installed).

    ``archives_checked``: a pool whose working dir is a package archive was checked from its index
    (``validate`` does not unpack packages).
    """
    spec = loaded.spec
    for role in spec.replica_counts():
        program = spec.resolved(role)
        pool_has = spec.pool(role)
        wd_field = f"pools.{role}.working_dir" if pool_has.working_dir is not None else "working_dir"
        workdir = loaded.resolve(program.working_dir)
        if archives_checked and workdir.is_file() and workdir.name.endswith((".whl", ".zip", ".tar.gz", ".tgz", ".tar")):
            continue
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
        if program.command is not None and not program.module:
            _check_command(loaded, role, program.command, workdir)
        if program.module and not _module_exists(program.module, workdir):
            mod_field = f"pools.{role}.module" if pool_has.module else "module"
            rel = program.module.replace(".", "/")
            raise SpecError(
                f"module {program.module!r} not found: no {rel}.py or {rel}/__init__.py under {workdir}, "
                "and it is not installed; fix `module` or `working_dir`",
                source=loaded.source,
                field=mod_field,
            )
    check_output_dir(loaded)


def _check_command(loaded: LoadedSpec, role: str, command: list[str], workdir: Path) -> None:
    """The command's program exists: a path (relative to the working dir) or a name on PATH."""
    spec = loaded.spec
    field = f"pools.{role}.command" if spec.pool(role).command else "command"
    program = command[0] if command else ""
    if not program:
        raise SpecError("is empty; give the program to run", source=loaded.source, field=field)
    if "/" in program:
        target = workdir / program
        if not target.is_file() or not os.access(target, os.X_OK):
            raise SpecError(f"{program!r} is not an executable file under {workdir}; fix the path or `chmod +x` it",
                            source=loaded.source, field=field)
    elif shutil.which(program) is None:
        raise SpecError(f"program {program!r} is not on PATH; install it or give its path", source=loaded.source,
                        field=field)


def check_output_dir(loaded: LoadedSpec) -> None:
    """``output_dir`` is a directory, or can become one (not a file such as /dev/null)."""
    if not loaded.spec.output_dir or "://" in loaded.spec.output_dir:
        return
    path = loaded.resolve(loaded.spec.output_dir)
    for candidate in (path, *path.parents):
        if candidate.exists():
            if not candidate.is_dir():
                raise SpecError(f"{candidate} exists and is not a directory; choose a directory",
                                source=loaded.source, field="output_dir")
            if not os.access(candidate, os.W_OK | os.X_OK):
                raise SpecError(f"{candidate} is not writable; choose a directory you can write",
                                source=loaded.source, field="output_dir")
            return


def check_replica_cap(loaded: LoadedSpec, limit: int) -> None:
    """A job of more than ``limit`` replicas is almost always a typo (10^9); ``--max-replicas`` lifts it."""
    total = loaded.spec.total_replicas
    if total > limit:
        biggest = max(loaded.spec.replica_counts().items(), key=lambda kv: kv[1])[0]
        raise SpecError(f"the job has {total:,} replicas, more than the limit of {limit}; lower it or pass "
                        f"--max-replicas {total}", source=loaded.source, field=f"pools.{biggest}.replicas")


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
    check_replica_cap(loaded, DEFAULT_MAX_REPLICAS)
    if check:
        check_programs(loaded)
    return loaded
