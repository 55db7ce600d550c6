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

from multiworker.cli.help_panels import HelpGroup
from multiworker.errors import BackendError, UserError

__all__ = ["app", "main"]

app = typer.Typer(
    name="multiworker",
    cls=HelpGroup,
    help="Run distributed multi-worker TensorFlow jobs with the cloud's exact TF_CONFIG: on this machine, "
    "on a Ray cluster, on Kubernetes (JobSet or TFJob) or on Vertex AI; watch, serve and tune them; convert "
    "to and from Vertex AI, AI Platform, TFJob and JobSet.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Command modules, in help order. A missing module is skipped so partial installs still work.
_COMMAND_MODULES = ("run_cmd", "build_cmd", "gcloud_cmd", "spec_cmd", "jobs_cmd", "monitor_cmd", "stacks_cmd", "doctor_cmd",
                    "convert_cmd", "data_cmd", "serve_cmd", "tune_cmd", "ui_cmd")


_registered: list[str] = []


def _print_version(value: bool) -> None:
    if value:
        from multiworker import __version__

        typer.echo(f"multiworker {__version__}")
        raise typer.Exit(0)


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of an error instead of one line "
                               "(also MULTIWORKER_DEBUG=1); allowed anywhere on the command line."),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print the version and exit."),
) -> None:
    """Options before the command (main() takes --debug out of the arguments before parsing)."""


def _register_all() -> None:
    if _registered:  # main() may run more than once in one process (tests)
        return
    _registered.append("done")
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
    except BackendError as exc:  # a platform refused or failed: one line, exit 1
        if debug:
            raise
        typer.echo(f"error: {exc}", err=True)
        sys.exit(1)
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
        if debug:
            raise
        if "readonly database" in str(exc) or "disk is full" in str(exc):
            from multiworker.home import home_dir

            typer.echo(f"error: MULTIWORKER_HOME {home_dir()}: cannot write the job store ({exc}); make it "
                       "writable or free space there", err=True)
            sys.exit(2)
        _internal_error(exc)


def _internal_error(exc: BaseException) -> None:
    """Last line: an unexpected exception is one line naming where the traceback went, never a raw traceback."""
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(exc))
    where = "run again with --debug to see the traceback"
    try:
        fd, path = tempfile.mkstemp(prefix="multiworker-error-", suffix=".log")
        with os.fdopen(fd, "w") as f:
            f.write(text)
        where = f"traceback in {path}"
    except OSError:
        pass
    first = str(exc).splitlines()[0] if str(exc) else ""
    typer.echo(f"error: internal error: {type(exc).__name__}: {first} ({where}; --debug shows it)", err=True)
    sys.exit(1)
