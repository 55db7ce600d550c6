"""``multiworker run``: load a job spec (any format), then supervise it here or detached."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

__all__ = ["register", "load_from_cli", "run_loaded"]


def load_from_cli(spec_file: Path, fmt: Optional[str], overrides: list[str], images: list[str],
                  dockerfile: Optional[Path], map_paths: list[str]):
    """Shared by run and validate: every format, made local with every mapping option."""
    from multiworker.spec.formats import load_job

    return load_job(spec_file, format=fmt, overrides=overrides or (), images=images or (),
                    dockerfile=str(dockerfile) if dockerfile else None, map_paths=map_paths or ())


def run(
    spec_file: Path = typer.Argument(..., help="Job spec: native YAML, Vertex CustomJob, AI Platform or TFJob."),
    trainer_args: Optional[list[str]] = typer.Argument(None, help="Arguments after `--` go to every replica."),
    overrides: list[str] = typer.Option([], "--set", help="Override a spec field: pools.worker.replicas=3 (repeatable)."),
    inject_failure: list[str] = typer.Option(
        [], "--inject-failure", help="Kill a replica once: ROLE-INDEX@DURATION[:SIGNAL], e.g. worker-1@15s:KILL."
    ),
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background; print the job id and return."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Hide replica output; show progress, events, summary."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show TensorFlow's INFO/WARNING log lines."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force the spec format: native|vertex|aiplatform|tfjob."),
    image: list[str] = typer.Option([], "--image", help="Map a container image to a local command: IMAGE=COMMAND."),
    dockerfile: Optional[Path] = typer.Option(None, "--dockerfile", help="Run the entry point of this Dockerfile."),
    map_path: list[str] = typer.Option([], "--map-path", help="Map a cloud path to a local dir: gs://bucket=./dir."),
) -> None:
    """Run a job: every replica a local process with the cloud's TF_CONFIG, supervised and restarted as a group.

    Exit codes: 0 succeeded, 1 failed, 2 bad input, 130 interrupted.
    """
    loaded = load_from_cli(spec_file, fmt, overrides, image, dockerfile, map_path)
    raise typer.Exit(run_loaded(loaded, trainer_args=trainer_args or [], inject_failures=inject_failure,
                                detach=detach, quiet=quiet, verbose=verbose))


def run_loaded(loaded, *, trainer_args: list[str], inject_failures: list[str], detach: bool, quiet: bool,
               verbose: bool) -> int:
    """Record and run a loaded job (any source: a spec file, a gcloud command line); return the exit code."""
    from multiworker.backends.local import EXIT_CODES, create_job, run_foreground, start_detached
    from multiworker.backends.local.console import ConsoleObserver
    from multiworker.faults import check_injections, parse_injection
    from multiworker.store import Store

    console = Console(highlight=False, soft_wrap=True)
    check_injections(loaded.spec, [parse_injection(t) for t in inject_failures])  # before the store is touched
    for note in loaded.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    store = Store()
    job_id = create_job(store, loaded, trainer_args=trainer_args, inject_failures=inject_failures)
    job = store.get_job(job_id)
    counts = ", ".join(f"{role} x{n}" for role, n in loaded.spec.replica_counts().items())
    if detach:
        pid = start_detached(store, job_id)
        if "--json" in sys.argv:
            typer.echo(json.dumps({"id": job_id, "supervisor_pid": pid}))
        else:
            typer.echo(job_id)
        return 0
    console.print(f"[bold]job {job_id}[/bold] ({loaded.spec.name}): {counts}")
    console.print(f"  output: {job['output_dir']}\n  logs:   {job['job_dir']}")
    state = run_foreground(store, job_id, ConsoleObserver(quiet=quiet, verbose=verbose, console=console))
    _print_outcome(console, store, job_id, state)
    return EXIT_CODES.get(state, 1)


def _print_outcome(console: Console, store, job_id: str, state: str) -> None:
    job = store.get_job(job_id)
    output = Path(job["output_dir"])
    if state == "Succeeded":
        model = output / "model"
        if model.exists():
            console.print(f"  model:   {model}")
        metrics = output / "metrics.json"
        if metrics.exists():
            console.print(f"  metrics: {metrics}")
    console.print(f"  restarts: {job['restarts']}   status: multiworker status {job_id}")


def register(app: typer.Typer) -> None:
    app.command(context_settings={"allow_interspersed_args": True})(run)
