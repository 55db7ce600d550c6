"""``multiworker stacks JOB``: every replica's Python stacks, side by side."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

__all__ = ["register", "stacks"]


def _print(dump, console: Console, *, full: bool) -> None:
    console.print(escape(dump.index.rstrip()))
    console.print(f"saved in {escape(str(dump.folder))}")
    table = Table(title="main thread of each replica, innermost frame first", box=None, pad_edge=False)
    mains = dump.main_threads()
    for name in mains:
        table.add_column(name, overflow="fold")
    for row in range(max((len(f) for f in mains.values()), default=0)):
        table.add_row(*(escape(f[row]) if row < len(f) else "" for f in mains.values()))
    console.print(table)
    if full:
        for text in dump.replicas.values():
            console.print()
            console.print(escape(text.rstrip()))


def stacks(
    job: str = typer.Argument("last", help="Job id, a unique prefix of it, or `last`."),
    saved: bool = typer.Option(False, "--saved", help="Show the dumps saved when an attempt hung, even while "
                               "the job runs (a finished job always shows those)."),
    brief: bool = typer.Option(False, "--brief", help="Only the main threads side by side, not every thread."),
) -> None:
    """Every replica's Python stacks (all threads, read with py-spy): live from a running job, or those saved
    when an attempt hung. The laggard, the replica the others wait for, is named when one stands out."""
    from multiworker.job import Store
    from multiworker.monitor.stacks_view import live_dump, saved_dumps
    from multiworker.status import refresh_liveness

    store = Store()
    job_id = store.resolve(job)
    record = refresh_liveness(store, job_id)
    console = Console(highlight=False, soft_wrap=True, emoji=False)
    if saved or record.is_terminal:
        dumps = saved_dumps(record)
        if not dumps:
            console.print(f"job {job_id} ({record.state.value}) has no saved stacks: no attempt of it hung")
            raise typer.Exit(1)
        for older in dumps[:-1]:
            console.print(f"earlier dump: {escape(str(older.folder))}")
        _print(dumps[-1], console, full=not brief)
        return
    _print(live_dump(store, job_id), console, full=not brief)


def register(app: typer.Typer) -> None:
    app.command()(stacks)
