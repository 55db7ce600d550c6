"""``multiworker convert``: write a job spec in another format (native, Vertex AI, AI Platform, TFJob, JobSet)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

__all__ = ["register", "convert"]

_TARGETS = ("native", "vertex", "aiplatform", "tfjob", "jobset", "pytorchjob")


def convert(
    source: list[str] = typer.Argument(
        ..., metavar="SPEC_FILE | -- GCLOUD_COMMAND...",
        help="Job spec (native YAML, Vertex CustomJob, AI Platform, TFJob, JobSet), or after `--` a gcloud training command.",
    ),
    to: str = typer.Option(..., "--to", help="Target format: native|vertex|aiplatform|tfjob|jobset|pytorchjob."),
    image: Optional[str] = typer.Option(None, "--image", help="Container image for pools without one (default: none; a cloud target may then refuse)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force the input format: native|vertex|aiplatform|tfjob|jobset (default: detected from the file)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a native field first: pools.worker.replicas=3."),
    allow_loss: bool = typer.Option(
        False, "--allow-loss", help="Drop what the target cannot express (with a note) instead of failing."
    ),
    output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write here (.json for JSON); default stdout."),
) -> None:
    """Convert a job spec, or the job a gcloud command submits, to another format. Cloud paths and images are kept.

    A gcloud command goes after `--`, as pasted: `multiworker convert --to vertex -o job.yaml -- gcloud ai
    custom-jobs create --display-name J --worker-pool-spec=...` (or `gcloud ai-platform jobs submit training`).
    Output to tfjob is checked against the Kubeflow TFJob CRD, to jobset against the JobSet CRD (v0.12.0),
    pytorchjob (a Kubeflow PyTorchJob, for `framework: pytorch`) is written only,
    to vertex against the CustomJob schema.
    What the target cannot express is an error naming the field (or a note with --allow-loss), e.g.
    `multiworker convert examples/taxifare/job.yaml --to vertex --image IMAGE --allow-loss` (its
    run_policy.backoff_limit has no Vertex AI equivalent).
    """
    from multiworker.errors import SpecError
    from multiworker.spec.formats import parse_job
    from multiworker.spec.formats.convert import convert as convert_job
    from multiworker.spec.formats.gcloud import looks_like_gcloud
    from multiworker.spec.load import apply_overrides

    if to not in _TARGETS:
        raise SpecError(f"{to!r} is not a format; use one of {', '.join(_TARGETS)}", source="--to")
    if len(source) > 1 or looks_like_gcloud(source) and not Path(source[0]).is_file():
        parsed, where, overrides = _from_gcloud(source, fmt, overrides)
        name = f"`{' '.join(source[:5])} ...`"
    else:
        parsed, where, name = parse_job(source[0], format=fmt), source[0], Path(source[0]).name
    if overrides:
        parsed.native = apply_overrides(parsed.native, overrides)
    doc, notes = convert_job(parsed, to, source=where, image=image, allow_loss=allow_loss)
    for note in [*parsed.notes, *notes]:
        typer.echo(f"note: {note}", err=True)
    if output is not None and output.suffix == ".json":
        text = json.dumps(doc, indent=2) + "\n"
    else:
        import yaml

        header = f"# {to} job converted by multiworker from {name} ({parsed.format})\n"
        text = header + yaml.dump(doc, Dumper=_dumper(), sort_keys=False, default_flow_style=False, allow_unicode=True)
    if output is None:
        typer.echo(text, nl=False)
    else:
        from multiworker.outfile import write_output

        write_output(output, text)
        typer.echo(f"wrote {output} ({to})", err=True)


def _from_gcloud(line: list[str], fmt: Optional[str], overrides: list[str]):
    """The job a gcloud command submits; its --set options apply too, its run-only options are noted."""
    from multiworker.errors import SpecError
    from multiworker.spec.formats.gcloud import parse_command

    if fmt is not None:
        raise SpecError("a gcloud command says its own format; drop --format", source="--format")
    job = parse_command(line, cwd=Path.cwd())
    run_only = [f"--{k}" for k in job.local if k != "set"]
    if run_only:
        job.parsed.notes.append(f"{', '.join(run_only)}: for runs only, not part of the converted job")
    return job.parsed, job.source, [*job.local.get("set", []), *overrides]


def _dumper():
    import yaml

    class Dumper(yaml.SafeDumper):
        """Lists of numbers (JobSet's exit codes 1-127) on one line."""

        def represent_list(self, data):
            flow = bool(data) and all(isinstance(v, int) for v in data)
            return self.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flow or None)

    Dumper.add_representer(list, Dumper.represent_list)
    return Dumper


def register(app: typer.Typer) -> None:
    app.command()(convert)
