"""Read what a Dockerfile runs: WORKDIR, COPY/ADD and ENTRYPOINT/CMD, mapped back to the build context."""

from __future__ import annotations

import dataclasses
import json
import os
import posixpath
import re
import shlex
from pathlib import Path

from multiworker.errors import SpecError
from multiworker.spec.load import read_text_capped

__all__ = ["Dockerfile", "read_dockerfile"]

_VAR = re.compile(r"\$(?:\{(\w+)(?::-([^}]*))?\}|(\w+))")
_SHELL_CHARS = set("|&;<>()$`\\\"'*?[]#~=%")


@dataclasses.dataclass
class Dockerfile:
    """The final stage of a Dockerfile, as far as running its entry point locally needs."""

    path: Path
    context: Path
    workdir: str = "/"
    entrypoint: list[str] | None = None
    entrypoint_shell: bool = False
    cmd: list[str] | None = None
    copies: list[tuple[str, Path]] = dataclasses.field(default_factory=list)
    env: list[str] = dataclasses.field(default_factory=list)  # ENV names, which a local run does not set

    def argv(self, args: list[str]) -> tuple[list[str], bool]:
        """The container's command line for ``args`` as Docker builds it; True if args were ignored."""
        if self.entrypoint is None:
            return (list(args) if args else list(self.cmd or [])), False
        if self.entrypoint_shell:
            return list(self.entrypoint), bool(args)
        return [*self.entrypoint, *(args if args else (self.cmd or []))], False

    def translate(self, container_path: str) -> Path | None:
        """The build-context path a container path was copied from, or None."""
        path = posixpath.normpath(posixpath.join(self.workdir, container_path))
        best: tuple[int, Path] | None = None
        for dest, host in self._pairs():
            if path == dest or path.startswith(dest.rstrip("/") + "/"):
                if best is None or len(dest) > best[0]:
                    rel = posixpath.relpath(path, dest)
                    best = (len(dest), Path(os.path.normpath(host / rel)))
        return best[1] if best else None

    def _pairs(self) -> list[tuple[str, Path]]:
        # `COPY trainer/ /app/trainer/` also means /app holds what the context dir holding trainer/ holds.
        # `COPY trainer/task.py ./trainer/task.py` (file by file, the tutorials' form) means the same for
        # WORKDIR: a destination ending in the source's context path puts the context at what precedes it.
        pairs = list(self.copies)
        for dest, host in self.copies:
            if dest != "/" and posixpath.basename(dest) == host.name and host != self.context:
                pairs.append((posixpath.dirname(dest) or "/", host.parent))
            if host.is_relative_to(self.context) and host != self.context:
                rel = host.relative_to(self.context).as_posix()
                if dest.endswith("/" + rel):
                    root = dest[: -len(rel) - 1] or "/"
                    if (root, self.context) not in pairs:
                        pairs.append((root, self.context))
        return pairs


def read_dockerfile(path: str | Path) -> Dockerfile:
    """Parse the last stage of a Dockerfile; the build context is the Dockerfile's directory."""
    path = Path(path)
    if path.is_dir():
        path = path / "Dockerfile"
    if not path.is_file():
        raise SpecError("no such Dockerfile; give the path of the Dockerfile (or its directory)", source=str(path))
    context = path.resolve().parent
    df = Dockerfile(path=path, context=context)
    variables: dict[str, str] = {}
    text = read_text_capped(path, what="a Dockerfile")
    for lineno, instruction, rest in _instructions(text):
        where = f"line {lineno}"
        try:
            df, variables = _apply(df, variables, instruction, rest, path=path, context=context, where=where)
        except ValueError as exc:  # shlex: an unterminated quote
            raise SpecError(f"{instruction} cannot be read: {exc}; close the quote", source=str(path), field=where) from None
    if df.entrypoint is None and df.cmd is None:
        raise SpecError("has no ENTRYPOINT or CMD in its last stage; nothing to run", source=str(path))
    return df


def _apply(df: Dockerfile, variables: dict[str, str], instruction: str, rest: str, *, path: Path, context: Path,
           where: str) -> tuple[Dockerfile, dict[str, str]]:
    """One instruction's effect on what the last stage runs."""
    if instruction == "FROM":
        df = Dockerfile(path=path, context=context)
        variables = {}
    elif instruction in ("ARG", "ENV"):
        for key, value in _assignments(rest):
            variables[key] = value
            if instruction == "ENV" and key not in df.env:
                df.env.append(key)
    elif instruction == "WORKDIR":
        df.workdir = posixpath.normpath(posixpath.join(df.workdir, _expand(rest.strip(), variables)))
    elif instruction in ("COPY", "ADD"):
        _copy(df, rest, variables, source=str(path), where=where)
    elif instruction in ("ENTRYPOINT", "CMD"):
        argv, shell = _command(rest, source=str(path), where=where)
        if instruction == "ENTRYPOINT":
            df.entrypoint, df.entrypoint_shell = argv, shell
        else:
            df.cmd = argv
    return df, variables


def _instructions(text: str):
    """(line number, INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    buffer, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buffer and (not line or line.startswith("#")):
            continue
        if buffer and line.startswith("#"):
            continue
        if not buffer:
            start = number
        if line.endswith("\\"):
            buffer += line[:-1] + " "
            continue
        buffer += line
        word, _, rest = buffer.partition(" ")
        yield start, word.upper(), rest.strip()
        buffer = ""
    if buffer:
        word, _, rest = buffer.partition(" ")
        yield start, word.upper(), rest.strip()


def _assignments(rest: str) -> list[tuple[str, str]]:
    parts = shlex.split(rest)
    if len(parts) >= 2 and "=" not in parts[0]:
        return [(parts[0], " ".join(parts[1:]))]  # legacy `ENV KEY value`
    return [tuple(p.split("=", 1)) if "=" in p else (p, "") for p in parts]  # type: ignore[misc]


def _expand(text: str, variables: dict[str, str]) -> str:
    return _VAR.sub(lambda m: variables.get(m.group(1) or m.group(3), m.group(2) or ""), text)


def _command(rest: str, *, source: str, where: str) -> tuple[list[str], bool]:
    """Exec form (JSON) or shell form; a simple shell form is split like exec form."""
    if rest.startswith("["):
        try:
            argv = json.loads(rest)
        except json.JSONDecodeError:
            argv = None
        if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
            return argv, False
    if not rest:
        raise SpecError("empty ENTRYPOINT/CMD", source=source, field=where)
    if set(rest) & _SHELL_CHARS - {"=", "-"}:
        return ["/bin/sh", "-c", rest], True
    return shlex.split(rest), True


def _copy(df: Dockerfile, rest: str, variables: dict[str, str], *, source: str, where: str) -> None:
    if rest.startswith("["):
        try:
            parts = json.loads(rest)
        except json.JSONDecodeError as exc:
            raise SpecError(f"COPY is not valid JSON: {exc.msg}", source=source, field=where) from None
    else:
        parts = shlex.split(rest)
    if not isinstance(parts, list) or not all(isinstance(p, str) for p in parts):
        raise SpecError(f"{rest[:40]} is not a list of paths; write COPY [\"src\", \"dest\"]", source=source, field=where)
    flags = [p for p in parts if p.startswith("--")]
    parts = [_expand(p, variables) for p in parts if not p.startswith("--")]
    if any(f.startswith("--from") for f in flags) or len(parts) < 2:
        return  # from another stage or image: not in the build context
    *sources, dest = parts
    dest = posixpath.normpath(posixpath.join(df.workdir, dest)) + ("/" if dest.endswith("/") else "")
    into_dir = dest.endswith("/") or len(sources) > 1
    for src in sources:
        if "://" in src:
            continue
        inside = Path(os.path.normpath(df.context / src.lstrip("/")))
        if src.startswith("/") or not inside.is_relative_to(df.context):
            raise SpecError(f"COPY {src}: the source is outside the build context {df.context}; Docker cannot copy "
                            "it either; copy it from inside the context", source=source, field=where)
        matches = sorted(df.context.glob(src)) if any(c in src for c in "*?[") else [df.context / src]
        if not any(m.exists() for m in matches):  # docker build fails here too; say so, not "WORKDIR not copied"
            raise SpecError(f"COPY {src}: not found in the build context {df.context} (docker build would fail "
                            "too); put it there or give the Dockerfile of the context that has it",
                            source=source, field=where)
        for host in matches:
            host = Path(os.path.normpath(host))  # a symlinked dir stays in the context
            if host.is_dir():
                target = dest.rstrip("/") or "/"
            else:
                target = posixpath.join(dest, host.name) if into_dir else dest
            df.copies.append((target, host))
