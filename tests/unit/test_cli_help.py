"""``--help`` as a newcomer reads it: commands in panels, readable metavars, every option saying what
it does and its default, ``--debug`` and ``--version`` listed, ``tune --help`` showing ``tune run``'s options."""

from __future__ import annotations

import re

import pytest
import typer
import typer.main
from typer.testing import CliRunner

from multiworker import __version__, cli
from multiworker.cli.help_panels import PANEL_ORDER, PANELS

WIDE = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


def _app() -> typer.Typer:
    cli._register_all()
    return cli.app


def _help(*args: str) -> str:
    result = CliRunner().invoke(_app(), [*args, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    return result.output


def _commands(command, path=()):
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, (*path, name))


def _options():
    root = typer.main.get_command(_app())
    for path, command in _commands(root):
        for param in command.params:
            if isinstance(param, typer.core.TyperOption):
                yield " ".join(path) or "multiworker", param


def test_top_level_help_groups_commands_in_panels():
    text = _help()
    titles = [t for t in PANEL_ORDER if f"─ {t} " in text]
    assert titles[:5] == list(PANEL_ORDER[:5]), titles  # run, watch, debug, cloud, data/tune/serve: in this order
    assert "─ Commands " not in text  # every registered command has a panel
    run_panel = text.split(f"─ {PANEL_ORDER[0]} ")[1].split("─ " + PANEL_ORDER[1])[0]
    assert re.search(r"│ run\s", run_panel) and "│ list " not in run_panel


def test_every_registered_command_is_in_a_panel():
    root = typer.main.get_command(_app())
    assert set(root.commands) <= set(PANELS), set(root.commands) - set(PANELS)


@pytest.mark.parametrize("args", [(), ("run",), ("tune",), ("tune", "run"), ("serve",), ("list",), ("data", "tfrecords")],
                         ids=lambda a: " ".join(a) or "top")
def test_help_shows_no_python_types(args):
    text = _help(*args)
    assert not re.search(r"<(bool|str|int|float|path|list\[[a-z]+\])>", text), text
    assert "--help" in text


def test_debug_and_version_are_listed_and_version_prints():
    text = _help()
    assert "--debug" in text and "--version" in text
    result = CliRunner().invoke(_app(), ["--version"])
    assert result.exit_code == 0 and result.output.strip() == f"multiworker {__version__}"


def test_tune_help_shows_the_options_of_tune_run():
    text = _help("tune")
    for flag in ("--config", "--parallel", "--max-trials", "--backend"):
        assert flag in text, flag


def test_every_option_says_what_it_does_and_its_default():
    """A value option with no default shown must name its default in its help; flags default to off."""
    missing = []
    for where, option in _options():
        if option.name == "help" or option.hidden:
            continue
        text = option.help or ""
        if not text.strip():
            missing.append(f"{where} {option.opts[0]}: no help")
        elif (not option.is_flag and not option.multiple and not option.required
              and option.default in (None, "") and "default" not in text.lower()):
            missing.append(f"{where} {option.opts[0]}: help names no default")
    assert not missing, "\n".join(missing)
