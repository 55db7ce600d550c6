"""How ``--help`` reads: commands grouped in panels, and metavars in plain words (TEXT, PATH,
INTEGER, a|b) instead of typer's Python types (``<bool>``, ``<list[str]>``).

A command joins a panel by its name in :data:`PANELS` (or by its own ``rich_help_panel``); one
named nowhere is listed under "Other commands". The group applies both when typer builds it, so
the ``multiworker`` entry point and a test's ``CliRunner`` see the same help.
"""

from __future__ import annotations

import inspect
import typing

import typer.core

__all__ = ["PANELS", "PANEL_ORDER", "HelpGroup", "readable_metavars"]

RUN = "Run jobs"
WATCH = "Watch jobs"
DEBUG = "Debug jobs"
CLOUD = "Cloud formats"
MODEL = "Data, tuning and serving"
OTHER = "Other commands"

#: panels in the order ``--help`` shows them
PANEL_ORDER = (RUN, WATCH, DEBUG, CLOUD, MODEL, OTHER)

#: command name -> panel; a new command adds one line here
PANELS: dict[str, str] = {
    "run": RUN, "validate": RUN, "build": RUN, "cancel": RUN, "delete": RUN, "gc": RUN, "schema": RUN,
    "list": WATCH, "status": WATCH, "watch": WATCH, "logs": WATCH, "plot": WATCH, "tensorboard": WATCH, "ui": WATCH,
    "describe": DEBUG, "stacks": DEBUG, "doctor": DEBUG,
    "gcloud": CLOUD, "convert": CLOUD,
    "data": MODEL, "tune": MODEL, "serve": MODEL,
}


_WORDS = {int: "INTEGER", float: "NUMBER", str: "TEXT", bool: "BOOL"}


def _metavar(param) -> str:
    """The value's kind in capitals, as click writes it: TEXT, PATH, INTEGER, a|b; '' for a flag."""
    if getattr(param, "is_flag", False):
        return ""
    kind = getattr(param, "type_descriptor", None)
    if kind is None:
        word = "TEXT"
    elif kind.is_choice:
        word = "|".join(str(getattr(c, "value", c)) for c in kind.choices or ())
    elif kind.is_path:
        word = "PATH"
    else:
        annotation = typing.get_args(kind.annotation)[0] if kind.is_list else kind.annotation
        word = _WORDS.get(annotation, "TEXT")
    return word


def _readable(param) -> None:
    if isinstance(param, typer.core.TyperArgument):
        # the name column shows the metavar; the help says what the value is, so no type column
        param.display_type_rich = lambda ctx: None
        if param.metavar is None:
            param.metavar = (param.name or "value").upper()
    elif param.metavar is None:
        param.metavar = _metavar(param)


def _unwrap(text: str) -> str:
    """Docstring line breaks inside a paragraph joined (rich help keeps them); indented or listed lines kept."""
    paragraphs = inspect.cleandoc(text).split("\n\n")
    return "\n\n".join(p if any(line[:1] in (" ", "-", "*", "\b") for line in p.splitlines()) else " ".join(p.split("\n"))
                       for p in paragraphs)


def readable_metavars(command) -> None:
    """Give every parameter without its own metavar a readable one (sub-commands and --help too)."""
    if isinstance(command.help, str):
        command.help = _unwrap(command.help)
    for param in command.params:
        _readable(param)
    get_help_option = command.get_help_option

    def help_option(ctx):
        option = get_help_option(ctx)
        if option is not None:
            _readable(option)
        return option

    command.get_help_option = help_option
    for sub in getattr(command, "commands", {}).values():
        readable_metavars(sub)


class HelpGroup(typer.core.TyperGroup):
    """The top-level group: commands in :data:`PANELS`' panels, readable metavars everywhere."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name, command in self.commands.items():
            if not isinstance(getattr(command, "rich_help_panel", None), str):  # unset: None or typer's Default
                command.rich_help_panel = PANELS.get(name, OTHER)  # type: ignore[attr-defined]
        readable_metavars(self)

    def list_commands(self, ctx: typer.Context) -> list[str]:
        """Panel by panel (typer prints panels in the order their first command comes)."""
        names = super().list_commands(ctx)

        def rank(name: str) -> int:
            panel = getattr(self.commands[name], "rich_help_panel", None) or OTHER
            return PANEL_ORDER.index(panel) if panel in PANEL_ORDER else len(PANEL_ORDER)

        return sorted(names, key=rank)  # stable: registration order within a panel
