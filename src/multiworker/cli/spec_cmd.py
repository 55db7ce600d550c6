"""``multiworker validate`` and ``multiworker schema``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

__all__ = ["register"]


def validate(
    spec_file: Path = typer.Argument(..., help="Job spec file (any supported format)."),
    overrides: list[str] = typer.Option([], "--set", help="Override a spec field: pools.worker.replicas=3."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force the format: native|vertex|aiplatform|tfjob|jobset."),
    image: list[str] = typer.Option([], "--image", help="Map a container image to a local command: IMAGE=COMMAND."),
    dockerfile: Optional[Path] = typer.Option(None, "--dockerfile", help="Run the entry point of this Dockerfile."),
    map_path: list[str] = typer.Option([], "--map-path", help="Map a cloud path to a local dir: gs://bucket=./dir."),
    as_json: bool = typer.Option(False, "--json", help="Print the resolved native spec as JSON."),
    max_replicas: Optional[int] = typer.Option(None, "--max-replicas", help="Allow more replicas than the 256 cap."),
) -> None:
    """Check a job spec without running it; exit 2 with a one-line error if it is invalid."""
    from multiworker.cli.run_cmd import load_from_cli
    from multiworker.cluster import thread_budget

    loaded = load_from_cli(spec_file, fmt, overrides, image, dockerfile, map_path, unpack=False,  # nothing written
                           max_replicas=max_replicas)
    spec = loaded.spec
    if as_json:
        typer.echo(json.dumps({"format": loaded.format, "notes": list(loaded.notes),
                               "spec": spec.model_dump(mode="json", exclude_none=True)}, indent=2))
        return
    for note in loaded.notes:
        typer.echo(f"note: {note}")
    counts = ", ".join(f"{role} x{n}" for role, n in spec.replica_counts().items())
    typer.echo(f"{loaded.source}: valid {loaded.format} spec '{spec.name}': {counts}; "
               f"restart_policy {spec.run_policy.restart_policy}, backoff_limit {spec.run_policy.backoff_limit}, "
               f"{thread_budget(spec)} thread(s) per replica")


def schema(output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write to a file instead of stdout.")) -> None:
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
