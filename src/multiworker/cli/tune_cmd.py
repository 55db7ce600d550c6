"""``multiworker tune``: run a hyperparameter study (each trial a whole job), show its results,
and convert its config between the AI Platform and Vertex AI forms."""

from __future__ import annotations

import copy
import json
import re
import shlex
import signal
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from multiworker.backends.base import backend_names
from multiworker.cli.backend_opts import BACKEND_OPT_HELP, BackendCommand, backend_options
from multiworker.errors import SpecError, UserError

__all__ = ["register", "tune_app"]

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,49}$")


class _DefaultRunGroup(typer.core.TyperGroup):
    """``tune SPEC ...`` means ``tune run SPEC ...``; ``tune show`` and ``tune convert`` are subcommands."""

    def parse_args(self, ctx, args):
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)

    def format_help(self, ctx, formatter):
        """``tune --help`` also lists the options of ``tune run``, the command ``tune SPEC ...`` runs."""
        run = self.commands.get("run")
        if run is None:
            return super().format_help(ctx, formatter)
        own = self.params
        shown = []
        for param in run.params:
            if isinstance(param, typer.core.TyperOption):
                param = copy.copy(param)
                param.rich_help_panel = "Options of `tune run` (what `tune SPEC ...` runs)"
                shown.append(param)
        self.params = [*own, *shown]
        try:
            return super().format_help(ctx, formatter)
        finally:
            self.params = own


tune_app = typer.Typer(cls=_DefaultRunGroup, no_args_is_help=True, help=(
    "Tune hyperparameters: `multiworker tune JOB.yaml --config hptuning.yaml`, or a Vertex AI "
    "HyperparameterTuningJob / AI Platform config alone; each trial's job runs on --backend with that "
    "backend's options (`tune run --help` lists them). Also `tune show STUDY`, `tune convert`."))


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _study_params(ostudy) -> list[dict]:
    from multiworker.tune import search

    return search.stored_config(ostudy).get("params", [])


def render_results(console: Console, ostudy, metric: str) -> dict | None:
    """The results table and the best trial; returns the best row."""
    from multiworker.tune.results import best_row, trial_rows

    rows = trial_rows(ostudy)
    names = [p["name"] for p in _study_params(ostudy)] or sorted({k for r in rows for k in r["values"]})
    table = Table(box=None, pad_edge=False)
    for col in ("TRIAL", "STATE", *names, metric.upper(), "JOB", "SECONDS"):
        table.add_column(col, no_wrap=True)
    best = best_row(ostudy, rows)
    for r in rows:
        mark = " *" if best is not None and r["trial"] == best["trial"] else ""
        table.add_row(f"{r['trial']}{mark}", r["state"], *[_fmt(r["values"].get(n)) for n in names],
                      _fmt(r["metric"]), r["job_id"] or "-", _fmt(r["seconds"]))
    console.print(table)
    if best is None:
        console.print("no trial succeeded with a metric yet")
    else:
        args = shlex.join(f"--{k}={v}" for k, v in best["values"].items())
        console.print(f"[bold]best: trial {best['trial']}[/bold]  {metric} {_fmt(best['metric'])}  {escape(args)}  "
                      f"(job {best['job_id']})")
    return best


def _job_name_check(name: str) -> str:
    if not _NAME.match(name):
        raise UserError(f"--study {name!r}: use letters, digits and . _ - (up to 50), starting with a letter or digit")
    return name


def run(
    ctx: typer.Context,
    spec_file: Path = typer.Argument(..., help="Job spec (any format), or a tuning file that holds its trial job."),
    trainer_args: Optional[list[str]] = typer.Argument(None, help="Arguments after `--` go to every replica."),
    config: Optional[Path] = typer.Option(None, "--config", help="Tuning config: AI Platform hyperparameters or a "
                                          "Vertex studySpec (default: the one SPEC holds)."),
    parallel: Optional[int] = typer.Option(None, "--parallel", min=1, help="Trials at a time (default: the config's)."),
    max_trials: Optional[int] = typer.Option(None, "--max-trials", min=1, help="Total trials (default: the config's)."),
    study_name: Optional[str] = typer.Option(None, "--study", help="Study name (default: the config's or job's name)."),
    resume: bool = typer.Option(False, "--resume", help="Continue the stored study: run only its remaining trials."),
    backend: str = typer.Option("local", "--backend", help=f"Backend that runs each trial's job: {' | '.join(backend_names())}."),
    backend_opt: list[str] = typer.Option([], "--backend-opt", "-B", help=BACKEND_OPT_HELP),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed the sampler, for a repeatable search (default: random)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a job spec field (repeatable)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force the job spec format: native|vertex|aiplatform|tfjob|jobset (default: detected from the file)."),
    image: list[str] = typer.Option([], "--image", help="Map a container image to a local command: IMAGE=COMMAND."),
    map_path: list[str] = typer.Option([], "--map-path", help="Map a cloud path to a local dir: gs://bucket=./dir."),
) -> None:
    """Run a hyperparameter study: each trial a whole job with the parameters as --name=value args,
    its metric read from the hypertune file (CLOUD_ML_HP_METRIC_FILE). Every trial's job gets the
    backend options given here. Exit 0 when a trial succeeded."""
    from multiworker.job import Store
    from multiworker.spec.formats import LoadOptions, load_job
    from multiworker.tune import search
    from multiworker.tune.config import JobRef, read_config
    from multiworker.tune.runner import TrialSetup, Tuner

    options = backend_options(ctx, backend, backend_opt)  # checked (and the backend found) before anything starts
    console = _console()
    if config is not None:
        cfg = read_config(config)
        if cfg.job is not None:
            console.print(f"[yellow]note:[/yellow] {config} also describes a job; the trials run {spec_file}")
        job_ref = JobRef(path=spec_file, format=fmt)
    else:
        try:
            cfg = read_config(spec_file)
        except SpecError as exc:
            if "not a tuning config" in str(exc):
                raise UserError(f"{spec_file}: no tuning settings in it; add --config hptuning.yaml "
                                "(trainingInput.hyperparameters or a Vertex studySpec)") from None
            raise
        if cfg.job is None:
            raise UserError(f"{spec_file}: a tuning config without a job (no trialJobSpec or trainingInput program); "
                            f"give the job first: multiworker tune JOB.yaml --config {spec_file}")
        job_ref = cfg.job

    def load():
        options = LoadOptions(format=job_ref.format, overrides=overrides, images=image, map_paths=map_path)
        return load_job(job_ref.path, options, data=job_ref.data)

    loaded = load()  # the job is checked before any trial starts
    for note in [*cfg.notes, *(n for n in loaded.notes if "hyperparameters" not in n)]:
        console.print(f"[yellow]note:[/yellow] {escape(note)}")
    study = cfg.study
    name = _job_name_check(study_name or (cfg.name or loaded.spec.name)[:50])
    max_trials = max_trials or study.max_trials
    parallel = parallel or study.parallel_trials
    store = Store()
    ostudy = search.open_study(store.home, name, study, resume=resume, seed=seed)
    tuner = Tuner(store, study, ostudy, TrialSetup(load=load, backend=backend, backend_options=options,
                                                         trainer_args=tuple(trainer_args or ())),
                  name=name, on_event=lambda kind, info: _print_event(console, kind, info, study.metric))
    recovered = tuner.recover()
    if recovered:
        console.print(f"[yellow]note:[/yellow] trial(s) {', '.join(map(str, recovered))} were cut off by an earlier "
                      "run: recorded Interrupted; their parameters run again")
    c = tuner.counts()
    finished = c["complete"] + c["pruned"] + c["failed"]
    console.print(f"[bold]study {name}[/bold]: {study.goal.lower()} {study.metric}, {len(study.params)} parameter(s), "
                  f"{study.algorithm}; {finished} of {max_trials} trial(s) done, {parallel} at a time")
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        reason = tuner.run(max_trials=max_trials, parallel=parallel)
    except KeyboardInterrupt:
        console.print(f"[bold red]interrupted[/bold red]: running trials stopped and recorded Interrupted; "
                      f"`multiworker tune ... --study {name} --resume` runs them again and the rest")
        raise typer.Exit(130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    if reason == "failed-limit":
        console.print("[bold red]stopped[/bold red]: too many trials failed (maxFailedTrials, or 3 with none succeeded)")
    elif reason == "grid-exhausted":
        console.print("note: GRID_SEARCH tried every point of the grid")
    best = render_results(console, ostudy, study.metric)
    console.print(f"  results: multiworker tune show {name} [-o plot.png]")
    raise typer.Exit(0 if best is not None else 1)


def _print_event(console: Console, kind: str, info: dict, metric: str) -> None:
    n = info.get("trial")
    if kind == "started":
        again = f" (rerun of trial {info['rerun_of']})" if info.get("rerun_of") else ""
        console.print(f"trial {n} started{again}: job {info['job_id']}  {escape(shlex.join(info['args']))}")
    elif kind == "complete":
        console.print(f"trial {n} [green]succeeded[/green]: {metric} {_fmt(info['value'])}  ({info['seconds']:.0f}s)")
    elif kind == "pruned":
        console.print(f"trial {n} [yellow]stopped early[/yellow]: {escape(info['message'])}")
    elif kind == "failed":
        console.print(f"trial {n} [red]failed[/red]: {escape(info['message'])}  (multiworker logs {info['job_id']})")
    elif kind == "interrupted":
        console.print(f"trial {n} [yellow]interrupted[/yellow]: job {info['job_id']} cancelled")
    elif kind == "note":
        console.print(f"[yellow]note:[/yellow] {escape(info['message'])}")


def show(
    study_name: Optional[str] = typer.Argument(None, help="Study name; without it, list the studies."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Also plot the metric against each "
                                          "parameter to this file (.png, .svg, .pdf; default: no plot)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show a study's trials (state, parameters, metric, job) and its best trial; list studies."""
    from multiworker.home import home_dir
    from multiworker.tune import search
    from multiworker.tune.results import best_row, plot_study, trial_rows

    home = home_dir()
    console = _console()
    if study_name is None:
        names = search.study_names(home)
        if as_json:
            typer.echo(json.dumps(names))
        elif not names:
            console.print("no studies yet; start one with `multiworker tune JOB.yaml --config hptuning.yaml`")
        else:
            console.print("\n".join(names))
        return
    ostudy = search.load_study(home, study_name)
    metric = search.stored_config(ostudy).get("metric", "metric")
    if as_json:
        rows = trial_rows(ostudy)
        typer.echo(json.dumps({"study": study_name, "metric": metric, "trials": rows,
                               "best": best_row(ostudy, rows)}, indent=2, default=str))
    else:
        render_results(console, ostudy, metric)
    if output is not None:
        plot_study(ostudy, _study_params(ostudy), output, metric=metric)
        typer.echo(f"wrote {output}", err=True)


def convert(
    config: Path = typer.Argument(..., help="Tuning config: AI Platform hyperparameters or a Vertex studySpec."),
    to: str = typer.Option(..., "--to", help="Target form: vertex|aiplatform."),
    job: Optional[Path] = typer.Option(None, "--job", help="Job spec to include as the trial job (any format; default: the config's own, if any)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force the --job format (default: detected from the file)."),
    image: Optional[str] = typer.Option(None, "--image", help="Container image for the job's pools without one (default: none)."),
    name: Optional[str] = typer.Option(None, "--study", help="displayName / jobId to write (default: the config's or the job's name)."),
    allow_loss: bool = typer.Option(False, "--allow-loss", help="Drop what the target cannot express, with a note."),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write here (.json for JSON); default stdout."),
) -> None:
    """Write a tuning config in the other cloud form (with its trial job, when there is one)."""
    import yaml

    from multiworker.tune.config import JobRef, read_config
    from multiworker.tune.convert import convert_config

    cfg = read_config(config)
    ref = JobRef(path=job, format=fmt) if job is not None else None
    doc, notes = convert_config(cfg, to, job=ref, name=name, image=image, allow_loss=allow_loss)
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    if output is not None and output.suffix == ".json":
        text = json.dumps(doc, indent=2) + "\n"
    else:
        text = (f"# {to} tuning config converted by multiworker from {config.name} ({cfg.form})\n"
                + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True))
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.write_text(text, encoding="utf-8")
        typer.echo(f"wrote {output} ({to})", err=True)


tune_app.command(cls=BackendCommand, context_settings={"allow_interspersed_args": True})(run)
tune_app.command()(show)
tune_app.command()(convert)


def register(app: typer.Typer) -> None:
    app.add_typer(tune_app, name="tune")
