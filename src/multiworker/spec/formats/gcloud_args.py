"""Read a pasted gcloud command line as gcloud's argument parser (calliope) does.

Flags as ``--flag=value`` or ``--flag value``; booleans as ``--flag`` / ``--no-flag``; ArgList values
split on commas (``^;^a;b`` picks another delimiter, as in gcloud); ArgDict values ``k=v,k=v`` with
known keys; ``--`` ends the flags. Multiworker's own options (``--image``, ``--map-path``, ...) may sit
anywhere before ``--``. An unknown flag or key is a one-line error with a did-you-mean.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path
from typing import Any

from multiworker.errors import SpecError
from multiworker.spec.formats.common import Parsed

__all__ = ["Flag", "Line", "GcloudJob", "parse_line", "split_list", "enum_name", "LOCAL_FLAGS"]

# Kinds: value, int, bool (``--x`` / ``--no-x``), optbool (a bool that may also take true/false), list
# (ArgList; repeats add up, as gcloud's UpdateAction does), dict (one ArgDict), dicts (a repeatable ArgDict).


@dataclasses.dataclass(frozen=True)
class Flag:
    kind: str = "value"
    keys: dict[str, str] | None = None  # ArgDict keys -> their kind (value, int, list), None for any key
    required_keys: tuple[str, ...] = ()


@dataclasses.dataclass
class Line:
    """A command line read against a flag table: gcloud values, positionals, user args, local options."""

    command: str
    values: dict[str, Any]
    positionals: list[str]
    user_args: list[str] | None  # after `--`; None when there is no `--`
    local: dict[str, Any]
    ignored: list[str]


@dataclasses.dataclass
class GcloudJob:
    """A gcloud command read into a job: ``parsed`` as its config would be, plus multiworker's options."""

    command: str
    parsed: Parsed
    source: str
    config: Path | None
    local: dict[str, Any]


def enum_name(value: str) -> str:
    """gcloud's ChoiceToEnum: nvidia-tesla-t4 -> NVIDIA_TESLA_T4."""
    return re.sub(r"[-\s]", "_", value).upper()


# Multiworker's options on the same line (the same names as `multiworker run`'s).
LOCAL_FLAGS: dict[str, Flag] = {
    "image": Flag("list1"), "dockerfile": Flag(), "map-path": Flag("list1"), "set": Flag("list1"),
    "inject-failure": Flag("list1"), "quiet": Flag("bool"), "verbose": Flag("bool"), "detach": Flag("bool"),
    "json": Flag("bool"), "containers": Flag("bool"), "pull": Flag(),
}
_SHORT = {"-q": "quiet", "-v": "verbose", "-d": "detach"}
# gcloud-wide flags: accepted and left out (they say how gcloud talks to Google Cloud).
_GLOBAL_FLAGS: dict[str, Flag] = {
    name: Flag() for name in ("project", "account", "billing-project", "configuration", "format", "verbosity",
                              "impersonate-service-account", "trace-token", "flatten")
} | {name: Flag("bool") for name in ("log-http", "user-output-enabled", "help")}
_TRUE, _FALSE = ("true", "yes", "1", "on"), ("false", "no", "0", "off")


def split_list(value: str, delim: str = ",") -> list[str]:
    """An ArgList value: ``a,b`` (or ``^;^a;b`` with a chosen delimiter); empty items dropped."""
    if value.startswith("^") and value.find("^", 1) > 1:
        end = value.find("^", 1)
        delim, value = value[1:end], value[end + 1:]
    return [item for item in value.split(delim) if item != ""]


def parse_line(tokens: list[str], flags: dict[str, Flag], *, command: str) -> Line:
    """Read ``tokens`` (after the command words) against ``flags``; every problem is a one-line SpecError."""
    line = Line(command=command, values={}, positionals=[], user_args=None, local={}, ignored=[])
    tables = ((flags, line.values), (LOCAL_FLAGS, line.local), (_GLOBAL_FLAGS, None))
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        if token == "--":
            line.user_args = list(tokens[i:])
            break
        if token in _SHORT:
            line.local[_SHORT[token]] = True
            continue
        if not token.startswith("-") or token == "-":
            line.positionals.append(token)
            continue
        name, eq, inline = token.lstrip("-").partition("=")
        negated = False
        found = _find(name, tables)
        if found is None and name.startswith("no-"):
            found = _find(name[3:], tables)
            if found is not None and found[0].kind not in ("bool", "optbool"):
                found = None
            negated = found is not None
            name = name[3:] if negated else name
        if found is None:
            raise _unknown_flag(name, [n for table, _ in tables for n in table], list(flags), command)
        flag, target = found
        if flag.kind in ("bool", "optbool"):
            value: Any = not negated
            if eq:
                value = _bool(inline, name, command)
            elif flag.kind == "optbool" and not negated and i < len(tokens) and tokens[i].lower() in _TRUE + _FALSE:
                value = _bool(tokens[i], name, command)
                i += 1
        else:
            if not eq:
                if i >= len(tokens) or tokens[i] == "--":
                    raise SpecError("needs a value", source=command, field=f"--{name}")
                inline = tokens[i]
                i += 1
            value = _convert(flag, inline, name, command)
        if target is None:
            line.ignored.append(f"--{name}")
        elif flag.kind in ("list", "list1", "dicts"):
            target.setdefault(name, []).extend(value)
        else:
            target[name] = value
    return line


def _find(name: str, tables) -> tuple[Flag, dict | None] | None:
    for table, target in tables:
        if name in table:
            return table[name], target
    return None


def _unknown_flag(name: str, known: list[str], own: list[str], command: str) -> SpecError:
    hint = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    fix = f"did you mean --{hint[0]}?" if hint else f"`{command}` takes --{', --'.join(sorted(own))}"
    return SpecError(f"unknown flag; {fix}", source=command, field=f"--{name}")


def _bool(text: str, name: str, command: str) -> bool:
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise SpecError(f"{text!r} is not true or false", source=command, field=f"--{name}")


def _int(text: str, field: str, command: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise SpecError(f"{text!r} is not a whole number", source=command, field=field) from None


def _convert(flag: Flag, text: str, name: str, command: str) -> Any:
    if flag.kind == "int":
        return _int(text, f"--{name}", command)
    if flag.kind == "list":
        return split_list(text)
    if flag.kind == "list1":  # multiworker's repeatable options: one item per use
        return [text]
    if flag.kind in ("dict", "dicts"):
        value = _dict(flag, text, name, command)
        return [value] if flag.kind == "dicts" else value
    return text


def _dict(flag: Flag, text: str, name: str, command: str) -> dict[str, Any]:
    """An ArgDict: ``k=v,k=v``; list-valued keys split on ``;`` as gcloud's worker pool spec does."""
    out: dict[str, Any] = {}
    field = f"--{name}"
    for item in split_list(text):
        key, eq, value = item.partition("=")
        key = key.strip()
        if flag.keys is not None and key not in flag.keys:
            hint = difflib.get_close_matches(key, list(flag.keys), n=1, cutoff=0.6)
            fix = f"did you mean `{hint[0]}`?" if hint else f"valid keys: {', '.join(flag.keys)}"
            raise SpecError(f"unknown key `{key}`; {fix}", source=command, field=field)
        if not eq:
            raise SpecError(f"`{item}` is not KEY=VALUE", source=command, field=field)
        kind = (flag.keys or {}).get(key, "value")
        if kind == "int":
            out[key] = _int(value, f"{field} {key}", command)
        elif kind == "list":
            out[key] = split_list(value, ";")
        else:
            out[key] = value
    missing = [k for k in flag.required_keys if k not in out]
    if missing:
        raise SpecError(f"key `{missing[0]}` is required ({', '.join(flag.required_keys)})", source=command,
                        field=field)
    return out
