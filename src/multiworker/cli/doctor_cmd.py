"""``multiworker doctor job.yaml``: cloud-parity mistakes in the spec and the trainer's source."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

__all__ = ["register", "doctor"]


def doctor(
    spec: list[str] = typer.Argument(..., metavar="SPEC_FILE | gcloud COMMAND...",
                                     help="Job spec (native YAML, Vertex CustomJob, AI Platform, TFJob or JobSet), "
                                     "or a pasted gcloud training command starting with `gcloud`."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force the spec format: native|vertex|aiplatform|tfjob|jobset (default: detected from the file)."),
    source: Optional[Path] = typer.Option(None, "--source", help="The trainer's directory or file, when the spec "
                                          "does not say (code inside a container image; default: the spec's working directory)."),
) -> None:
    """Find what fails only on the cloud, before a cluster or a bill is involved: TF_CONFIG read as master
    vs chief, the evaluator in the cluster map, Keras 3 under MultiWorkerMirroredStrategy, workers saving
    over the chief's files, gs:// without the GCS filesystem package, an expired Vertex image, env
    overriding the platform's variables, file sharding with too few files, an unscaled global batch.
    The trainer's source is parsed, never imported or run. With a gcloud line, options go before `gcloud`.

    Exit codes: 0 nothing found, 1 findings, 2 bad input.
    """
    from multiworker.doctor import diagnose
    from multiworker.doctor._run import check_spec_file, diagnose_gcloud

    if spec[0] == "gcloud":
        findings, notes = diagnose_gcloud(spec[1:], source=source)
    else:
        spec, fmt, source = _options_after(spec, fmt, source)
        check_spec_file(Path(spec[0]))
        findings, notes = diagnose(Path(spec[0]), fmt=fmt, source=source)
    for note in notes:
        typer.echo(f"note: {note}")
    for finding in findings:
        typer.echo(str(finding))
    if findings:
        typer.echo(f"{len(findings)} finding(s)")
        raise typer.Exit(1)
    typer.echo("no findings")


def _options_after(words: list[str], fmt: str | None, source: Path | None) -> tuple[list[str], str | None, Path | None]:
    """--format / --source given after the spec file (the command stops parsing options at its first argument)."""
    rest = list(words[1:])
    while rest:
        flag, _, value = rest.pop(0).partition("=")
        if flag not in ("--format", "--source") or not (value or rest):
            raise typer.BadParameter(f"{flag!r}: doctor takes one spec file (a gcloud line starts with `gcloud`), "
                                     "then --format or --source")
        value = value or rest.pop(0)
        if flag == "--format":
            fmt = value
        else:
            source = Path(value)
    return words[:1], fmt, source


def register(app: typer.Typer) -> None:
    # a gcloud line's own flags (--worker-pool-spec...) are the line's, not doctor's
    app.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})(doctor)
