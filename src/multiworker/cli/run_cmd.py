"""``multiworker run``: load a job spec (any format), record it for a backend, then run it here
(the launcher drives it to its end) or detached."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from multiworker.backends.base import backend_names

__all__ = ["register", "load_from_cli", "backend_options"]


def backend_options(**given) -> dict:
    """The backend-specific options given on the command line, by name, for ``create_job``
    (unset ones left out): a backend's own options become ``run`` parameters passed here."""
    return {name: value for name, value in given.items() if value not in (None, [], ())}


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
    backend: str = typer.Option("local", "--backend", help=f"Where the replicas run: {' | '.join(backend_names())}."),
) -> None:
    """Run a job: every replica a process with the cloud's TF_CONFIG, supervised and restarted as a group.

    Exit codes: 0 succeeded, 1 failed, 2 bad input, 130 interrupted.
    """
    from multiworker.backends.base import get_backend
    from multiworker.backends.daemon import start_detached
    from multiworker.jobs import create_job
    from multiworker.monitor.console import ConsoleObserver
    from multiworker.store import Store

    console = Console(highlight=False, soft_wrap=True)
    loaded = load_from_cli(spec_file, fmt, overrides, image, dockerfile, map_path)
    for note in loaded.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    store = Store()
    job_id = create_job(store, loaded, backend=backend, backend_options=backend_options(),
                        trainer_args=trainer_args or [], inject_failures=inject_failure)
    job = store.get_job(job_id)
    for note in json.loads(job["options_json"])["notes"][len(loaded.notes):]:  # the backend's own
        console.print(f"[yellow]note:[/yellow] {note}")
    counts = ", ".join(f"{role} x{n}" for role, n in loaded.spec.replica_counts().items())
    if detach:
        pid = start_detached(store, job_id)
        if "--json" in sys.argv:
            typer.echo(json.dumps({"id": job_id, "supervisor_pid": pid}))
        else:
            typer.echo(job_id)
        return
    console.print(f"[bold]job {job_id}[/bold] ({loaded.spec.name}): {counts}")
    console.print(f"  output: {job['output_dir']}\n  logs:   {job['job_dir']}")
    state = get_backend(backend).run(store, job_id, ConsoleObserver(quiet=quiet, verbose=verbose, console=console))
    _print_outcome(console, store, job_id, state)
    raise typer.Exit(state.exit_code)


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
