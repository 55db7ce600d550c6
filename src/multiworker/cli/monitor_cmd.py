"""Watching a job as a cloud console would: ``watch``, ``logs``, ``plot``, ``tensorboard``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

__all__ = ["register"]

JOB_ARG = typer.Argument("last", help="Job id, a unique prefix of it, or `last`.")
JSON_OPT = typer.Option(False, "--json", help="Print JSON.")


def _store():
    from multiworker.job import Store

    return Store()


def watch(
    job: str = JOB_ARG,
    interval: float = typer.Option(1.0, "--interval", "-i", min=0.1, help="Seconds between redraws."),
) -> None:
    """Live view of a job: progress per replica, throughput, restarts, CPU/memory, recent events.

    Exits when the job ends, with the job's exit code (0 succeeded, 1 failed or lost, 130 cancelled).
    """
    from multiworker.job import JobState
    from multiworker.monitor.watch import watch as run_watch

    store = _store()
    try:
        doc = run_watch(store, store.resolve(job), console=Console(highlight=False), interval=interval)
    except KeyboardInterrupt:
        raise typer.Exit(0) from None  # stop watching; the job goes on
    raise typer.Exit(JobState(doc["state"]).exit_code)


def logs(
    job: str = JOB_ARG,
    replica: Optional[str] = typer.Option(None, "--replica", "-r", help="Only this replica (worker-1), or `supervisor` (default: every replica)."),
    attempt: Optional[int] = typer.Option(None, "--attempt", "-a", min=0, help="This attempt (default: the latest)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Stream new lines, across restarts, until the job ends."),
    tail: Optional[int] = typer.Option(None, "--tail", "-n", min=0, help="Start with the last N lines of each replica (default: all lines)."),
    prefix: Optional[bool] = typer.Option(None, "--prefix/--no-prefix", help="Prefix lines with \\[worker-1] "
                                          "(default: when showing more than one replica)."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per line: replica, attempt, line."),
) -> None:
    """Print a job's replica logs (the latest attempt, every replica prefixed), or follow them."""
    from multiworker.monitor.logs import follow_logs, log_files, read_logs

    store = _store()
    job_id = store.resolve(job)
    shown, files = log_files(store, job_id, attempt=attempt, replica=replica)
    if prefix is None:
        prefix = len(files) > 1
    lines = (follow_logs(store, job_id, attempt=attempt, replica=replica, tail=tail) if follow
             else read_logs(files, shown, tail=tail))
    out = sys.stdout
    try:
        for line in lines:
            if line.replica is None:  # a marker, e.g. a new attempt: not part of any log
                if not as_json:
                    typer.echo(line.text, err=True)
                continue
            if as_json:
                out.write(json.dumps({"replica": line.replica, "attempt": line.attempt, "line": line.text}) + "\n")
            else:
                out.write(f"[{line.replica}] {line.text}\n" if prefix else line.text + "\n")
            if follow:
                out.flush()
    except KeyboardInterrupt:
        raise typer.Exit(0) from None
    except BrokenPipeError:  # `multiworker logs JOB | head`: no error, and none at exit either
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise typer.Exit(0) from None


def plot(
    job: str = JOB_ARG,
    output: Path = typer.Option(Path("job.png"), "--output", "-o", help="Image file: .png, .svg or .pdf."),
    as_json: bool = typer.Option(False, "--json", help="Print the plotted series as JSON."),
) -> None:
    """Chart loss and metrics per epoch, and CPU and memory per replica over time."""
    from multiworker.monitor.plot import collect_series, plot_job

    store = _store()
    job_id = store.resolve(job)
    result = plot_job(store, job_id, output)
    if as_json:
        typer.echo(json.dumps({"path": str(result.path), "series": collect_series(store, job_id),
                               "drawn": result.drawn}, indent=2))
    else:
        typer.echo(str(result.path))


def tensorboard(
    job: str = JOB_ARG,
    port: Optional[int] = typer.Option(None, "--port", "-p", help="Port (default: 6006, or a free one)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on; 0.0.0.0 exposes it to the network."),
    as_json: bool = typer.Option(False, "--json", help="Print the URL as JSON once it serves."),
) -> None:
    """Start TensorBoard on the job's log directory (<output>/logs), print the URL, serve until Ctrl-C."""
    from multiworker.monitor.tensorboard import logdir_of, serve

    store = _store()
    job_id = store.resolve(job)
    logdir = logdir_of(store.get_job(job_id))

    def ready(url: str) -> None:
        if as_json:
            typer.echo(json.dumps({"url": url, "logdir": str(logdir)}))
        else:
            typer.echo(f"TensorBoard for job {job_id} ({logdir}) at {url}  (Ctrl-C to stop)")
        sys.stdout.flush()

    try:
        code = serve(store, job_id, host=host, port=port, on_ready=ready)
    except KeyboardInterrupt:
        code = 0
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command()(watch)
    app.command()(logs)
    app.command()(plot)
    app.command()(tensorboard)
