"""``multiworker status``: a job's state from the store, from any terminal, during and after a run."""

from __future__ import annotations

import json

import typer
from rich.console import Console
from rich.table import Table

__all__ = ["register", "render_status"]


def _fmt_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def render_status(doc: dict, console: Console) -> None:
    """The human view of a status document."""
    console.print(f"[bold]{doc['id']}[/bold]  {doc['name']}  [bold]{doc['state']}[/bold]  "
                  f"restarts {doc['restarts']}  {doc['duration_seconds']:.0f}s")
    if doc.get("epoch"):
        last = doc["last_metrics"] or {}
        from multiworker.backends.local.console import format_progress

        console.print(f"  {format_progress(last)}")
    if doc.get("message") and doc["state"] not in ("Running", "Pending"):
        console.print(f"  {doc['message']}")
    table = Table(box=None, pad_edge=False)
    for col in ("REPLICA", "STATE", "PID", "EXIT", "CPU%", "MEMORY", "ATTEMPT"):
        table.add_column(col)
    for r in doc["replicas"]:
        table.add_row(r["name"], r["state"], str(r["pid"] or "-"), "-" if r["exit_code"] is None else str(r["exit_code"]),
                      "-" if r["cpu_percent"] is None else f"{r['cpu_percent']:.0f}", _fmt_bytes(r["rss_bytes"]),
                      str(r["attempt"]))
    console.print(table)
    console.print(f"  output: {doc['output_dir']}")


def status(
    job: str = typer.Argument("last", help="Job id, a unique prefix of it, or `last`."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show a job's state, replicas (state, pid, exit code, CPU, memory) and last metrics."""
    from multiworker.status import job_status
    from multiworker.store import Store

    store = Store()
    doc = job_status(store, store.resolve(job))
    if as_json:
        typer.echo(json.dumps(doc, indent=2))
    else:
        render_status(doc, Console(highlight=False))


def register(app: typer.Typer) -> None:
    app.command()(status)
