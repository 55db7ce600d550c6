"""``multiworker validate`` and ``multiworker schema``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

__all__ = ["register"]


def _check_images(loaded) -> None:
    """A Vertex AI prebuilt image past its end of availability is refused (one line)."""
    from multiworker.containers.vertex_images import check_image

    for role in loaded.spec.replica_counts():
        check_image(loaded.spec.resolved(role).image, field=f"{loaded.source}: pools.{role}.image")


def validate(
    spec_file: Path = typer.Argument(..., help="Job spec file (any supported format)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a spec field: pools.worker.replicas=3."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force the format: native|vertex|aiplatform|tfjob|jobset (default: detected from the file)."),
    image: list[str] = typer.Option([], "--image", help="Map a container image to a local command: IMAGE=COMMAND."),
    dockerfile: Optional[Path] = typer.Option(None, "--dockerfile", help="Run the entry point of this Dockerfile (default: the spec's module or command)."),
    map_path: list[str] = typer.Option([], "--map-path", help="Map a cloud path to a local dir: gs://bucket=./dir."),
    as_json: bool = typer.Option(False, "--json", help="Print the resolved native spec as JSON."),
    max_replicas: Optional[int] = typer.Option(None, "--max-replicas", help="Allow up to N replicas (default: at most 256)."),
) -> None:
    """Check a job spec without running it; exit 2 with a one-line error if it is invalid. A tuning config
    (hptuning.yaml, a Vertex AI HyperparameterTuningJob) is checked as `tune` reads it, with its trial job."""
    from multiworker.cli.run_cmd import load_from_cli
    from multiworker.spec.formats import LoadOptions, load_job
    from multiworker.spec.load import DEFAULT_MAX_REPLICAS

    tuning = _tuning_config(spec_file) if fmt is None else None
    if tuning is not None and tuning.job is None:
        loaded = None
    elif tuning is not None:  # the trial job the tuning file carries, read as `tune` reads it
        ref = tuning.job
        options = LoadOptions(format=ref.format, overrides=overrides, images=image,
                              dockerfile=str(dockerfile) if dockerfile else None, map_paths=map_path,
                              max_replicas=max_replicas or DEFAULT_MAX_REPLICAS, unpack=False)
        loaded = load_job(ref.path, options, data=ref.data)
    else:
        loaded = load_from_cli(spec_file, fmt, overrides, image, dockerfile, map_path, unpack=False,  # nothing written
                               max_replicas=max_replicas)
        _check_images(loaded)
    if as_json:
        doc = {} if loaded is None else {"format": loaded.format, "notes": list(loaded.notes),
                                         "spec": loaded.spec.model_dump(mode="json", exclude_none=True)}
        if tuning is not None:
            doc["tuning"] = {"form": tuning.form, "notes": tuning.notes, "study": tuning.study.model_dump(mode="json")}
        typer.echo(json.dumps(doc, indent=2))
        return
    for note in [*(tuning.notes if tuning else ()), *(loaded.notes if loaded else ())]:
        typer.echo(f"note: {note}")
    if tuning is None:
        typer.echo(f"{loaded.source}: {_job_summary(loaded)}")
        return
    s = tuning.study
    line = (f"{spec_file}: valid {tuning.form} tuning config: {s.goal.lower()} {s.metric} over "
            f"{', '.join(p.name for p in s.params)}, {s.max_trials} trial(s), {s.parallel_trials} at a time; ")
    if loaded is None:
        line += f"no trial job in it: multiworker tune JOB.yaml --config {spec_file}"
    else:
        line += f"trial job: {_job_summary(loaded)}"
    typer.echo(line)


def _tuning_config(spec_file: Path):
    """The tuning config in ``spec_file`` (read and checked), or None when it holds no tuning settings."""
    from multiworker.spec.load import read_yaml
    from multiworker.tune.config import read_config

    data = read_yaml(spec_file)
    if not isinstance(data, dict):
        return None
    inputs = [data.get(k) for k in ("trainingInput", "training_input")]
    if ("studySpec" in data or "study_spec" in data or "hyperparameters" in data
            or any(isinstance(ti, dict) and "hyperparameters" in ti for ti in inputs)):
        return read_config(spec_file)
    return None


def _job_summary(loaded) -> str:
    from multiworker.cluster import thread_budget

    spec = loaded.spec
    counts = ", ".join(f"{role} x{n}" for role, n in spec.replica_counts().items())
    return (f"valid {loaded.format} spec '{spec.name}': {counts}; restart_policy {spec.run_policy.restart_policy}, "
            f"backoff_limit {spec.run_policy.backoff_limit}, {thread_budget(spec)} thread(s) per replica")


def schema(output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write to this file (default: stdout).")) -> None:
    """Print the JSON Schema of the native job spec (for editors: yaml-language-server)."""
    from multiworker.spec.model import JobSpec

    text = json.dumps(JobSpec.model_json_schema(), indent=2)
    if output:
        from multiworker.outfile import write_output

        write_output(output, text + "\n")
    else:
        typer.echo(text)


def register(app: typer.Typer) -> None:
    app.command()(validate)
    app.command()(schema)
