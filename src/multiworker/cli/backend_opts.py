"""Backend options on the command line. ``run`` and ``tune`` take the chosen backend's options (the
fields of its ``Options`` model) as flags, ``ray_address`` as ``--ray-address`` (``--x`` / ``--no-x``
for a bool), and as ``--backend-opt KEY=VALUE``. Flags, their help and the error for another
backend's flag all come from the registry's models, so adding a backend edits no CLI module.

The flags are taken out of the arguments before ``--`` (what follows it goes to the trainer
untouched); the command's own options keep their meaning, so a field named like one of them
(``image``) is given with ``--backend-opt`` unless the command passes its own option on.
"""

from __future__ import annotations

import difflib
import logging
import types
import typing
from collections.abc import Sequence
from typing import Any, ClassVar

import typer
from pydantic.fields import FieldInfo
from rich.markup import escape
from typer.core import TyperCommand

from multiworker.backends.base import BackendOptions, backend_class, backend_names
from multiworker.errors import UserError

__all__ = ["BackendCommand", "backend_options", "option_models", "options_help", "BACKEND_OPT_HELP"]

log = logging.getLogger(__name__)

_META = "multiworker.backend_flags"
BACKEND_OPT_HELP = "A backend option, KEY=VALUE (repeatable); each backend's options are listed below, also as flags."


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def _key(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def option_models() -> dict[str, type[BackendOptions]]:
    """Every backend's options model by backend name; one that cannot be imported is left out."""
    models = {}
    for name in backend_names():
        try:
            models[name] = backend_class(name).Options
        except UserError as exc:  # its extra is not installed
            log.debug("backend %s: %s", name, exc)
        except Exception as exc:  # noqa: BLE001 - a broken plugin must not break run and tune for the others
            log.warning("backend %s cannot be loaded (%s); its options are left out", name, exc)
    return models


def _types(info: FieldInfo) -> list[Any]:
    """The field's annotation without None: ``str | None`` -> [str]."""
    annotation = info.annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [a for a in typing.get_args(annotation) if a is not type(None)]
    return [annotation]


def _is_bool(info: FieldInfo) -> bool:
    return _types(info) == [bool]


def _metavar(info: FieldInfo) -> str:
    kinds = _types(info)
    if len(kinds) == 1 and typing.get_origin(kinds[0]) is typing.Literal:
        return "|".join(str(v) for v in typing.get_args(kinds[0]))
    if kinds == [int]:
        return "INTEGER"
    if kinds == [float]:
        return "NUMBER"
    return "TEXT"


def options_help(own: set[str], passthrough: frozenset[str] = frozenset()) -> str:
    """The help section listing each backend's options, from the models' field descriptions;
    ``own``: the command's own long options (a field named like one is shown as ``-B KEY=...``)."""
    paragraphs = ["[bold]Backend options[/bold] (flags, or --backend-opt KEY=VALUE), by backend:"]
    for name, model in option_models().items():
        if not model.model_fields:
            continue
        rows = []
        for key, info in model.model_fields.items():
            flag = _flag(key)
            shown = flag if _is_bool(info) else f"{flag} {_metavar(info)}"
            if flag in own and key not in passthrough:
                shown = f"-B {key}={_metavar(info)}"
            default = info.get_default()
            note = f" (default {default})" if default not in (None, False) and not info.is_required() else ""
            rows.append((shown, (info.description or "").rstrip(".") + note))
        width = max(len(shown) for shown, _ in rows)
        lines = [f"[bold]{escape(name)}[/bold]:",
                 *(f"  {escape(shown.ljust(width))}  {escape(text)}" for shown, text in rows)]
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


class BackendCommand(TyperCommand):
    """A command that takes the chosen backend's options as flags (see the module docstring)."""

    #: fields the command's own option of the same name passes on itself (``run``'s ``--image``)
    passthrough: ClassVar[frozenset[str]] = frozenset()

    @property
    def epilog(self) -> str:  # type: ignore[override]
        """The command's own epilog, then the backends' options (built when help is shown)."""
        own = {o for p in self.params for o in getattr(p, "opts", ()) if o.startswith("--")}
        return "\n\n".join(filter(None, [self._own_epilog, options_help(own, self.passthrough)]))

    @epilog.setter
    def epilog(self, value: str | None) -> None:
        self._own_epilog = value

    def parse_args(self, ctx: typer.Context, args: list[str]) -> list[str]:  # type: ignore[override]
        cut = args.index("--") if "--" in args else len(args)
        rest, given = _take_backend_flags(self, ctx, args[:cut])
        ctx.meta[_META] = given
        return super().parse_args(ctx, [*rest, *args[cut:]])


def _own_options(cmd: TyperCommand, ctx: typer.Context) -> tuple[dict[str, bool], str]:
    """The command's own option names (-> whether each takes a value) and its --backend default."""
    own: dict[str, bool] = {}
    default = "local"
    for param in cmd.get_params(ctx):
        if getattr(param, "param_type_name", "") != "option":
            continue
        takes_value = not (getattr(param, "is_flag", False) or getattr(param, "count", False))
        for opt in (*param.opts, *param.secondary_opts):
            own[opt] = takes_value
        if param.name == "backend" and isinstance(param.default, str):
            default = param.default
    return own, default


def _take_backend_flags(cmd: TyperCommand, ctx: typer.Context, head: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Split the arguments before ``--`` into the command's own and the backend's flags (by field)."""
    own, backend = _own_options(cmd, ctx)
    strangers = False
    i = 0
    while i < len(head):  # first the backend: its model says which flags take a value
        name, eq, value = head[i].partition("=")
        if name in own:
            if name == "--backend" and (eq or i + 1 < len(head)):
                backend = value if eq else head[i + 1]
            elif name == "--containers":
                backend = "containers"
            i += 1 + (own[name] and not eq)
            continue
        strangers = strangers or head[i].startswith("--")
        i += 1
    if not strangers:
        return head, {}
    fields = backend_class(backend).Options.model_fields
    rest: list[str] = []
    given: dict[str, Any] = {}
    i = 0
    while i < len(head):
        token = head[i]
        name, eq, value = token.partition("=")
        if name in own or not token.startswith("--"):  # the command's own, positionals, short options
            step = 1 + (name in own and own[name] and not eq)
            rest.extend(head[i:i + step])
            i += step
            continue
        key = _key(name)
        negated = key[3:] if key.startswith("no_") else None
        if key in fields and _is_bool(fields[key]):
            given[key] = value if eq else True
        elif negated in fields and _is_bool(fields[negated]) and not eq:
            given[negated] = False
        elif key in fields:
            if not eq:
                if i + 1 >= len(head):
                    raise UserError(f"{name}: needs a value ({_metavar(fields[key])})")
                i += 1
                value = head[i]
            given[key] = value
        else:
            raise _not_an_option(name, backend, own, ctx)
        i += 1
    return rest, given


def _not_an_option(flag: str, backend: str, own: dict[str, bool], ctx: typer.Context | None) -> UserError:
    """The error for a flag the chosen backend does not take: whose it is, or the nearest name."""
    key = _key(flag)
    models = option_models()
    owners = [name for name, model in models.items()
              if key in model.model_fields
              or (key.startswith("no_") and key[3:] in model.model_fields and _is_bool(model.model_fields[key[3:]]))]
    if owners:
        if len(owners) == 1:
            return UserError(f"{flag}: only the {owners[0]} backend uses it; add --backend {owners[0]}")
        return UserError(f"{flag}: only the {', '.join(owners[:-1])} and {owners[-1]} backends use it; "
                         f"add --backend {owners[0]} (or {', '.join(owners[1:])})")
    whose: dict[str, str | None] = {o: None for o in own if o.startswith("--")}
    for name, model in models.items():
        for field in model.model_fields:
            whose.setdefault(_flag(field), name)
    near = difflib.get_close_matches(flag, list(whose), n=1)
    if near:
        other = f" (a {whose[near[0]]} backend option)" if whose[near[0]] not in (None, backend) else ""
        return UserError(f"{flag}: no such option; did you mean {near[0]}{other}?")
    where = f"`{ctx.command_path} --help`" if ctx is not None else "--help"
    return UserError(f"{flag}: no such option; {where} lists the options and each backend's")


def backend_options(ctx: typer.Context, backend: str, pairs: Sequence[str] = (), **passed: Any) -> dict[str, Any]:
    """The backend options given on the command line (its flags, ``--backend-opt`` pairs, and what the
    command passes itself: ``passed``, None left out), validated by the backend: a one-line error
    naming the flag before anything starts."""
    options: dict[str, Any] = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.strip():
            raise UserError(f"--backend-opt {pair!r}: give KEY=VALUE, e.g. --backend-opt ray_address=10.0.0.1:6379")
        options[_key(key.strip())] = value
    flags = {**ctx.meta.get(_META, {}), **{k: v for k, v in passed.items() if v is not None}}
    for key, value in flags.items():
        if key in options and options[key] != value:
            raise UserError(f"{_flag(key)}: given twice, also as --backend-opt {key}={options[key]}; keep one")
        options[key] = value
    cls = backend_class(backend)
    for key in options:
        if key not in cls.Options.model_fields and key not in flags:
            error = _not_an_option(_flag(key), backend, {}, ctx)
            raise UserError(f"--backend-opt {key}: {str(error).partition(': ')[2]}")
    return cls().options(options).model_dump(exclude_unset=True)
