"""Job records from any terminal, during and after a run: ``list``, ``status``, ``describe``,
and the housekeeping ``cancel``, ``delete``, ``gc``."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from multiworker.monitor.format import (
    STATE_STYLES,
    fmt_bytes,
    fmt_duration,
    fmt_metrics,
)

__all__ = ["register", "render_status", "render_list", "render_describe"]

JOB_ARG = typer.Argument("last", help="Job id, a unique prefix of it, or `last`.")
JSON_OPT = typer.Option(False, "--json", help="Print JSON.")


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True, emoji=False)


def _echo_json(doc) -> None:
    typer.echo(json.dumps(doc, indent=2, default=str))


def _state(state: str) -> str:
    style = STATE_STYLES.get(state, "")
    return f"[{style}]{state}[/{style}]" if style else state


def _store():
    from multiworker.job import Store

    return Store()


# -- list ----------------------------------------------------------------------------------
_SHRINKS = ("NAME", "STUDY")  # cut first (with …) when a terminal is too narrow
_DROPS = ("DURATION", "AGE", "RESTARTS", "REPLICAS")  # then left out, in this order; ID and STATE never


def fit_columns(header: list[str], rows: list[list[str]], width: int | None) -> tuple[list[str], list[int]]:
    """The columns shown and their widths in ``width`` characters (None: no limit): ids and states in
    full always; names and studies cut, then the least needed columns left out, until the rows fit."""
    widths = {h: max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)}
    shown = list(header)

    def total() -> int:
        return sum(widths[h] for h in shown) + 2 * (len(shown) - 1)

    if width is not None:
        for name in _SHRINKS:
            if name in shown and total() > width:
                widths[name] = max(len(name), 8, widths[name] - (total() - width))
        for name in _DROPS:
            if name in shown and total() > width:
                shown.remove(name)
    return shown, [widths[h] for h in shown]


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_list(rows: list[dict], console: Console) -> None:
    """Aligned columns; job ids and states are never cut (a pipe gets every column in full)."""
    if not rows:
        console.print("no jobs yet; start one with `multiworker run job.yaml`")
        return
    studies = any(r.get("study") for r in rows)  # tuning trials: a STUDY column
    header = ["ID", "NAME", *(["STUDY"] if studies else []), "STATE", "REPLICAS", "RESTARTS", "AGE", "DURATION"]
    cells = []
    for r in rows:
        replicas = f"{r['running']}/{r['replicas']}" if r["state"] in ("Running", "Restarting", "Pending") else str(r["replicas"])
        study = [r.get("study") or "-"] if studies else []
        cells.append([r["id"], r["name"], *study, r["state"], replicas, str(r["restarts"]),
                      fmt_duration(r["age_seconds"]), fmt_duration(r["duration_seconds"])])
    shown, widths = fit_columns(header, cells, console.width if console.is_terminal else None)
    index = [header.index(h) for h in shown]
    console.print("[bold]" + escape("  ".join(h.ljust(w) for h, w in zip(shown, widths)).rstrip()) + "[/bold]",
                  soft_wrap=True)
    for row in cells:
        parts = []
        for i, h, w in zip(index, shown, widths):
            text = _cut(row[i], w)
            pad = " " * (w - len(text))
            parts.append((_state(escape(text)) if h == "STATE" else escape(text)) + pad)
        console.print("  ".join(parts).rstrip(), soft_wrap=True)


def list_jobs(
    limit: Optional[int] = typer.Option(None, "--limit", "-n", help="Show only the newest N jobs (default: all)."),
    as_json: bool = JSON_OPT,
) -> None:
    """List jobs, newest first: id, name, state, replicas (running/total), restarts, age, duration."""
    from multiworker.status import job_rows

    rows = job_rows(_store(), limit)
    if as_json:
        _echo_json(rows)
    else:
        render_list(rows, _console())


# -- status --------------------------------------------------------------------------------
def render_status(doc: dict, console: Console) -> None:
    """The human view of a status document."""
    from multiworker.monitor.format import format_progress
    from multiworker.monitor.watch import replica_progress
    from multiworker.status import HEARTBEAT_STALE

    console.print(f"[bold]{doc['id']}[/bold]  {escape(doc['name'])}  [bold]{_state(doc['state'])}[/bold]  "
                  f"attempt {doc['attempt']}  restarts {doc['restarts']}  {fmt_duration(doc['duration_seconds'])}")
    if doc.get("last_metrics"):
        console.print(f"  {escape(format_progress(doc['last_metrics']))}")
    for kind in ("eval", "final"):
        if doc.get(f"{kind}_metrics"):
            console.print(f"  {kind}: {escape(fmt_metrics(doc[f'{kind}_metrics']))}")
    if doc.get("message") and doc["state"] not in ("Running", "Pending"):
        console.print(f"  {escape(doc['message'])}")
    age = doc.get("heartbeat_age_seconds")
    if age is not None and age > HEARTBEAT_STALE:
        console.print(f"  [bold red]warning:[/bold red] no heartbeat from the supervisor for {age:.0f}s")
    table = Table(box=None, pad_edge=False)
    for col in ("REPLICA", "STATE", "PID", "EXIT", "CPU%", "MEMORY", "ATTEMPT", "PROGRESS"):
        table.add_column(col, no_wrap=True)
    for r in doc["replicas"]:
        prog = replica_progress(r, doc)
        label = "" if prog["borrowed"] or not prog["epoch"] else f"epoch {prog['epoch']} " + (
            "done" if prog["step"] == "done" else f"step {prog['step']}")
        table.add_row(r["name"], _state(r["state"]), str(r["pid"] or "-"),
                      "-" if r["exit_code"] is None else str(r["exit_code"]),
                      "-" if r["cpu_percent"] is None else f"{r['cpu_percent']:.0f}", fmt_bytes(r["rss_bytes"]),
                      str(r["attempt"]), label)
    console.print(table)
    console.print(f"  output: {doc['output_dir']}")


def status(job: str = JOB_ARG, as_json: bool = JSON_OPT) -> None:
    """Show a job's state, replicas (state, pid, exit code, CPU, memory), epoch x/y and last metrics."""
    from multiworker.status import job_status

    store = _store()
    doc = job_status(store, store.resolve(job))
    if as_json:
        _echo_json(doc)
    else:
        render_status(doc, _console())


# -- describe ------------------------------------------------------------------------------
def _when(ts: float | None) -> str:
    if ts is None:
        return "-"
    return f"{datetime.fromtimestamp(ts):%Y-%m-%d %H:%M:%S} ({fmt_duration(time.time() - ts)} ago)"


def render_describe(doc: dict, console: Console) -> None:
    import yaml

    st = doc["status"]
    fields = [
        ("Name", st["name"]), ("ID", st["id"]), ("State", _state(st["state"])),
        ("Spec", f"{st['spec_path'] or '-'} ({st['format'] or 'native'})"), ("Created", _when(st["created_at"])),
        ("Started", _when(st["started_at"])), ("Finished", _when(st["finished_at"])),
        ("Duration", fmt_duration(st["duration_seconds"])), ("Restarts", str(st["restarts"])),
        ("Output", st["output_dir"]), ("Logs", st["job_dir"]),
        ("Trainer args", " ".join(doc["options"].get("trainer_args", [])) or "-"),
        ("Injected failures", ", ".join(doc["options"].get("inject_failures", [])) or "-"),
    ]
    for key, value in fields:
        console.print(f"[bold]{key + ':':<19}[/bold]{value if key == 'State' else escape(str(value))}")
    if st.get("message"):
        first, *rest = st["message"].splitlines()
        console.print(f"[bold]{'Message:':<19}[/bold]{escape(first)}")
        for line in rest:
            console.print(f"{'':19}{escape(line)}")
    console.print("[bold]Spec (resolved):[/bold]")
    spec_yaml = yaml.safe_dump(_drop_none(doc["spec"]), sort_keys=False, default_flow_style=False).rstrip()
    console.print("\n".join("  " + line for line in escape(spec_yaml).splitlines()))
    console.print("[bold]Attempts:[/bold]")
    for a in doc["attempts"]:
        took = fmt_duration((a["finished_at"] or time.time()) - a["started_at"])
        console.print(f"  {a['n']}  {datetime.fromtimestamp(a['started_at']):%H:%M:%S}  {took:>8}  {a['outcome'] or 'Running'}")
    console.print("[bold]Replicas:[/bold]")
    rows = [(r["name"], r["state"], f"attempt {r['attempt']}", f"pid {r['pid'] or '-'}", f"port {r['port'] or '-'}",
             f"exit {'-' if r['exit_code'] is None else r['exit_code']}") for r in doc["replicas"]]
    _print_columns(console, rows)
    console.print("[bold]Events:[/bold]")
    t0 = st["created_at"]
    rows = [(f"+{ev['ts'] - t0:.1f}s", ev["type"], ev["reason"], ev["replica"] or "supervisor", ev["message"] or "")
            for ev in doc["events"]]
    _print_columns(console, rows, header=("AT", "TYPE", "REASON", "FROM", "MESSAGE"),
                   warn=[ev["type"] == "Warning" for ev in doc["events"]])


def _print_columns(console: Console, rows: list[tuple], *, header: tuple | None = None,
                   warn: list[bool] | None = None) -> None:
    """Aligned columns that never wrap (the last column runs on; its extra lines are indented)."""
    table = [header, *rows] if header else rows
    if not table:
        return
    widths = [max(len(str(r[i])) for r in table) for i in range(len(table[0]) - 1)]
    for n, row in enumerate(table):
        first, *rest = str(row[-1]).splitlines() or [""]
        line = "  " + "  ".join(str(v).ljust(w) for v, w in zip(row, widths)) + "  "
        indent = " " * len(line)
        style = "yellow" if warn and header and n > 0 and warn[n - 1] else ("bold" if header and n == 0 else "")
        text = escape(line + first) + "".join("\n" + escape(indent + extra) for extra in rest)
        console.print(f"[{style}]{text}[/{style}]" if style else text, soft_wrap=True)


def _drop_none(value):
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def describe(job: str = JOB_ARG, as_json: bool = JSON_OPT) -> None:
    """Show a job's resolved spec, attempts, replicas and its full event timeline."""
    from multiworker.status import describe_job

    store = _store()
    doc = describe_job(store, store.resolve(job))
    if as_json:
        _echo_json(doc)
    else:
        render_describe(doc, _console())


# -- cancel, delete, gc --------------------------------------------------------------------
def cancel(
    jobs: list[str] = typer.Argument(..., help="Job ids, unique prefixes, or `last`."),
    timeout: Optional[float] = typer.Option(None, help="Seconds to wait for the supervisor (default: grace period + 20)."),
    as_json: bool = JSON_OPT,
) -> None:
    """Stop running jobs cleanly: every replica stopped, state Cancelled. Ended jobs are left as they are."""
    from multiworker.job import JobState
    from multiworker.monitor.lifecycle import cancel_job

    store = _store()
    out = []
    for ref in jobs:
        job_id = store.resolve(ref)
        before = store.get_job(job_id).state
        job = cancel_job(store, job_id, timeout=timeout)
        out.append({"id": job_id, "state": job.state, "was": before, "message": job.message})
    if as_json:
        _echo_json(out)
        return
    console = _console()
    for r in out:
        if JobState(r["was"]).is_terminal:
            console.print(f"{r['id']}: already {_state(r['state'])}")
        else:
            console.print(f"{r['id']}: {_state(r['state'])}")


def delete(
    jobs: list[str] = typer.Argument(..., help="Job ids, unique prefixes, or `last`."),
    force: bool = typer.Option(False, "--force", "-f", help="Cancel a running job first."),
    as_json: bool = JSON_OPT,
) -> None:
    """Delete jobs: their records, logs and job directory. An output directory outside it is kept."""
    from multiworker.monitor.lifecycle import delete_job

    store = _store()
    ids = [store.resolve(ref) for ref in jobs]  # all refs valid before anything is deleted
    out = [delete_job(store, job_id, force=force) for job_id in dict.fromkeys(ids)]
    if as_json:
        _echo_json(out)
        return
    console = _console()
    for r in out:
        kept = f" (kept {', '.join(r['kept'])})" if r["kept"] else ""
        console.print(f"deleted {r['id']} {escape(r['name'])}{escape(kept)}")


def gc(
    older_than: str = typer.Option("7d", "--older-than", help="Delete jobs that ended longer ago than this: 7d, 12h, 30m."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only show what would be deleted."),
    as_json: bool = JSON_OPT,
) -> None:
    """Delete ended jobs older than a duration (running jobs are never touched), and the temporary
    copies a killed save left in any ended job's output."""
    from multiworker.errors import UserError
    from multiworker.monitor.lifecycle import gc_jobs, sweep_leftovers
    from multiworker.spec.model import parse_duration

    if older_than.strip().replace(".", "", 1).isdigit():
        raise UserError(f"--older-than {older_than}: give a unit, e.g. {older_than.strip()}d, {older_than.strip()}h "
                        f"or {older_than.strip()}m")
    try:
        seconds = parse_duration(older_than)
    except ValueError as exc:
        raise UserError(f"--older-than: {exc}") from None
    store = _store()
    out = gc_jobs(store, seconds, dry_run=dry_run)
    leftovers = sweep_leftovers(store, dry_run=dry_run)
    if as_json:
        _echo_json(out)
        return
    verb = "would delete" if dry_run else "deleted"
    console = _console()
    for r in out:
        console.print(f"{verb} {r['id']} {escape(r['name'])} ({r['state']})")
    console.print(f"{verb} {len(out)} job(s) that ended more than {older_than} ago")
    if leftovers:
        console.print(f"{'would remove' if dry_run else 'removed'} {len(leftovers)} temporary cop(ies) a killed save "
                      f"left in ended jobs' outputs: {escape(', '.join(leftovers[:3]))}{' ...' if len(leftovers) > 3 else ''}")


def register(app: typer.Typer) -> None:
    app.command("list")(list_jobs)
    app.command()(status)
    app.command()(describe)
    app.command()(cancel)
    app.command()(delete)
    app.command()(gc)
