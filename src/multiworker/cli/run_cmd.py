"""``multiworker run``: load a job spec (any format), record it for a backend, then run it here
(the launcher drives it to its end) or detached."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape

from multiworker.backends.base import backend_names
from multiworker.cli.backend_opts import BACKEND_OPT_HELP, BackendCommand, backend_options

__all__ = ["register", "load_from_cli", "run_loaded"]


def load_from_cli(spec_file: Path, fmt: Optional[str], overrides: list[str], images: list[str],
                  dockerfile: Optional[Path], map_paths: list[str], *, local: bool = True,
                  max_replicas: Optional[int] = None, unpack: bool = True, containers: bool = False):
    """Shared by run and validate: every format, made local with every mapping option (``local``:
    False for a platform-managed backend, which keeps images and gs:// paths as they are)."""
    from multiworker.spec.formats import LoadOptions, load_job
    from multiworker.spec.load import DEFAULT_MAX_REPLICAS

    options = LoadOptions(format=fmt, overrides=overrides or (), images=images or (),
                          dockerfile=str(dockerfile) if dockerfile else None, map_paths=map_paths or (), check=local,
                          max_replicas=max_replicas or DEFAULT_MAX_REPLICAS, unpack=unpack, containers=containers)
    return load_job(spec_file, options)


def run(
    ctx: typer.Context,
    spec_file: Path = typer.Argument(..., help="Job spec: native YAML, Vertex CustomJob, AI Platform, TFJob or JobSet."),
    trainer_args: Optional[list[str]] = typer.Argument(None, help="Arguments after `--` go to every replica."),
    overrides: list[str] = typer.Option([], "--set", help="Override a spec field: pools.worker.replicas=3 (repeatable)."),
    inject_failure: list[str] = typer.Option(
        [], "--inject-failure", help="Kill, stop or preempt a replica once, to prove recovery: ROLE-INDEX@WHEN[:ACTION], WHEN a "
                                "duration (15s), epoch:N (once epoch N has finished) or step:N; ACTION KILL (default), TERM, "
                                "STOP, CONT or PREEMPT=30s (SIGTERM, the notice, SIGKILL); ROLE-* for every replica of a role. "
                                "e.g. worker-1@step:300 (mid-training in the MNIST demo), worker-1@step:200:STOP."
    ),
    detach: bool = typer.Option(False, "--detach", "-d", help="Run in the background; print the job id and return."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Hide replica output; show progress, events, summary."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show library INFO lines and TensorFlow's start-up log lines (the replica logs always hold them)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force the spec format: native|vertex|aiplatform|tfjob|jobset (default: detected from the file)."),
    image: list[str] = typer.Option([], "--image", help="Map a container image to a local command: IMAGE=COMMAND; "
                                    "with a backend whose platform runs the pools (one with an --image option "
                                    "below): the container image they run."),
    dockerfile: Optional[Path] = typer.Option(None, "--dockerfile", help="Run the entry point of this Dockerfile (default: the spec's module or command)."),
    map_path: list[str] = typer.Option([], "--map-path", help="Map a cloud path to a local dir: gs://bucket=./dir."),
    max_replicas: Optional[int] = typer.Option(None, "--max-replicas", help="Allow up to N replicas (default: at most 256)."),
    backend: str = typer.Option("local", "--backend", help=f"Where the replicas run: {' | '.join(backend_names())}."),
    backend_opt: list[str] = typer.Option([], "--backend-opt", "-B", help=BACKEND_OPT_HELP),
    containers: bool = typer.Option(False, "--containers", help="Run every replica as a container of its pool's "
                                    "image (--backend containers; see docs/containers.md)."),
) -> None:
    """Run a job: every replica a process with the cloud's TF_CONFIG, supervised and restarted as a group.

    Exit codes: 0 succeeded, 1 failed, 2 bad input, 130 interrupted.
    """
    from multiworker.backends.base import backend_class

    if containers:
        return _run_containers(ctx, spec_file, trainer_args or [], overrides, inject_failure, detach, quiet, verbose,
                               fmt, image, dockerfile, map_path, max_replicas, backend_opt)
    remote = not backend_class(backend).supervised_here  # the platform runs the images: nothing to map locally
    options = backend_options(ctx, backend, backend_opt,
                              image=_remote_image(image, backend, inject_failure) if remote else None)
    if remote:
        image = []
    loaded = load_from_cli(spec_file, fmt, overrides, image, dockerfile, map_path, local=not remote,
                           max_replicas=max_replicas)
    raise typer.Exit(run_loaded(loaded, trainer_args=trainer_args or [], inject_failures=inject_failure,
                                detach=detach, quiet=quiet, verbose=verbose, backend=backend,
                                options=options))


def _run_containers(ctx, spec_file, trainer_args, overrides, inject_failure, detach, quiet, verbose, fmt, image,
                    dockerfile, map_path, max_replicas, backend_opt) -> None:
    """``run --containers``: the images run as they are; --image names the image of pools without one,
    --map-path directories are bind-mounted."""
    from multiworker.errors import UserError

    if dockerfile is not None:
        raise UserError("--dockerfile: with --containers the image runs; build it first with "
                        "`multiworker build SPEC --dockerfile PATH -t IMAGE`")
    if len(image) > 1 or any("=" in i for i in image):
        raise UserError("--image: with --containers give the one image the pools without their own run "
                        "(--image trainer:v1), not IMAGE=COMMAND mappings")
    mounts = [item.partition("=")[2].strip() for item in map_path]
    mounts = [str(Path(m).resolve()) for m in mounts if m]
    options = backend_options(ctx, "containers", backend_opt, image=image[0] if image else None,
                              mounts=",".join(mounts) or None)
    loaded = load_from_cli(spec_file, fmt, overrides, [], None, map_path, local=False, max_replicas=max_replicas,
                           containers=True)
    raise typer.Exit(run_loaded(loaded, trainer_args=trainer_args, inject_failures=inject_failure, detach=detach,
                                quiet=quiet, verbose=verbose, backend="containers", options=options))


def run_loaded(loaded, *, trainer_args: list[str], inject_failures: list[str], detach: bool, quiet: bool,
               verbose: bool, backend: str = "local", options: dict | None = None) -> int:
    """Record and run a loaded job (any source: a spec file, a gcloud command line); return the exit code."""
    from multiworker.backends.base import get_backend
    from multiworker.backends.daemon import start_detached
    from multiworker.errors import MultiworkerError
    from multiworker.faults import check_injections, parse_injection
    from multiworker.job import Store
    from multiworker.jobs import create_job
    from multiworker.monitor.console import ConsoleObserver, run_console

    console = run_console()
    check_injections(loaded.spec, [parse_injection(t) for t in inject_failures])  # before the store is touched
    for note in loaded.notes:
        console.print(f"[yellow]note:[/yellow] {note}")
    store = Store()
    job_id = create_job(store, loaded, backend=backend, backend_options=options or {},
                        trainer_args=trainer_args, inject_failures=inject_failures)
    job = store.get_job(job_id)
    for note in job.run.notes[len(loaded.notes):]:  # the backend's own
        console.print(f"[yellow]note:[/yellow] {note}")
    counts = ", ".join(f"{role} x{n}" for role, n in loaded.spec.replica_counts().items())
    if detach:
        pid = start_detached(store, job_id)
        if "--json" in sys.argv:
            typer.echo(json.dumps({"id": job_id, "supervisor_pid": pid}))
        else:
            typer.echo(job_id)
        return 0
    console.print(f"[bold]job {job_id}[/bold] ({loaded.spec.name}): {counts}")
    console.print(f"  output: {job.output_dir}\n  logs:   {job.job_dir}")
    observer = ConsoleObserver(quiet=quiet, verbose=verbose, console=console, defer_end=True)
    try:
        state = get_backend(backend).run(store, job_id, observer)
    except BaseException as exc:
        if not (isinstance(exc, MultiworkerError) and observer.finished and observer.finished[1] == str(exc)):
            observer.print_end()
        raise  # a user or backend error that ended the job: its one error line says it, once
    observer.print_end()
    _print_outcome(console, store, job_id, state)
    return state.exit_code


def _remote_image(images: list[str], backend: str, injections: list[str]) -> Optional[str]:
    """On a platform backend ``--image IMAGE`` is the pools' image (not an IMAGE=COMMAND mapping)."""
    from multiworker.errors import UserError

    if injections:
        raise UserError(f"--inject-failure: the platform runs the replicas of a {backend} job, not multiworker; "
                        "kill a pod there (kubectl delete pod) or a task instead")
    if len(images) > 1 or any("=" in i for i in images):
        raise UserError(f"--image: with --backend {backend} give the one container image the pools run "
                        "(--image gcr.io/p/trainer:v1), not IMAGE=COMMAND mappings")
    return images[0] if images else None


def _print_outcome(console: Console, store, job_id: str, state: str) -> None:
    job = store.get_job(job_id)
    if state == "Succeeded" and "://" not in (job.output_dir or ""):
        output = Path(job.output_dir)
        model = output / "model"
        if model.exists():
            console.print(f"  model:   {model}")
        metrics = output / "metrics.json"
        if metrics.exists():
            console.print(f"  metrics: {metrics}")
    console.print(f"  restarts: {job.restarts}   status: multiworker status {job_id}")
    for note in injection_notes(store.events(job_id)):
        console.print(f"  [yellow]injection: {escape(note)}[/yellow]")


def injection_notes(events: list[dict]) -> list[str]:
    """The summary's word on --inject-failure when it proved nothing: fired after training, or never."""
    return [e["message"] for e in events
            if e["reason"] == "InjectionNotFired"
            or (e["reason"] in ("InjectedFailure", "Preempted") and "tests no recovery" in e["message"])]


class _RunCommand(BackendCommand):
    passthrough = frozenset({"image"})  # --image: the pools' image on a platform backend


def register(app: typer.Typer) -> None:
    app.command(cls=_RunCommand, context_settings={"allow_interspersed_args": True})(run)
