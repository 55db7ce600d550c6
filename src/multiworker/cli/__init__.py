"""The ``multiworker`` command line: thin commands over the Python API.

Each command module defines ``register(app)``; this package wires them into one
typer app and maps user errors to one line and exit code 2.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

import typer

from multiworker.errors import UserError

__all__ = ["app", "main"]

app = typer.Typer(
    name="multiworker",
    help="Run distributed multi-worker TensorFlow jobs on this machine with the cloud's exact TF_CONFIG, "
    "and convert them to and from Vertex AI, AI Platform and Kubeflow TFJob.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, in help order. A missing module is skipped so partial installs still work.
_COMMAND_MODULES = ("run_cmd", "spec_cmd", "jobs_cmd", "monitor_cmd", "convert_cmd", "data_cmd", "ui_cmd")


def _register_all() -> None:
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        module.register(app)


def debug_enabled() -> bool:
    return os.environ.get("MULTIWORKER_DEBUG", "") not in ("", "0") or "--debug" in sys.argv


def main() -> None:
    """Console entry point."""
    debug = debug_enabled()
    if "--debug" in sys.argv:
        sys.argv.remove("--debug")
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    _register_all()
    try:
        result = app(standalone_mode=False)  # click returns an Exit's code instead of raising
        sys.exit(result if isinstance(result, int) else 0)
    except UserError as exc:
        if debug:
            raise
        typer.echo(f"error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(130)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # click usage errors arrive here in non-standalone mode
        # typer may vendor click (typer._click), so recognise ClickException by its shape.
        if hasattr(exc, "show") and hasattr(exc, "exit_code") and not debug:
            exc.show()
            sys.exit(exc.exit_code if exc.exit_code else 2)
        raise
