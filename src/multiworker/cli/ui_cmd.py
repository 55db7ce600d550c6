"""``multiworker ui``: the web dashboard (jobs, one job, compare) until Ctrl-C."""

from __future__ import annotations

import sys

import typer

__all__ = ["register"]


def ui(
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on. Anything but loopback "
                             "(e.g. 0.0.0.0) requires the token printed with the URL."),
    port: int = typer.Option(8265, "--port", "-p", min=0, max=65535, help="Port; 0 picks any free port."),
    open_browser: bool = typer.Option(False, "--open", help="Open the dashboard in a browser."),
) -> None:
    """Serve the web dashboard: every job live, curves, logs, compare, cancel and delete; until Ctrl-C."""
    from multiworker.errors import UserError
    from multiworker.ui import EXTRA_HINT, missing_dependencies

    missing = missing_dependencies()
    if missing:
        raise UserError(f"the dashboard needs {', '.join(missing)}; install it with `{EXTRA_HINT}`")
    from multiworker.ui.server import serve

    def ready(url: str, remote: bool) -> None:
        typer.echo(f"multiworker dashboard at {url}  (Ctrl-C to stop)")
        if remote:
            typer.echo(f"listening on {host}: anyone who can reach it needs the token in that URL; "
                       "TensorBoard started from it listens on 127.0.0.1 only", err=True)
        sys.stdout.flush()

    raise typer.Exit(serve(host=host, port=port, open_browser=open_browser, on_ready=ready))


def register(app: typer.Typer) -> None:
    app.command()(ui)
