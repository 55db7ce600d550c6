"""``multiworker build``: the job's image, from its Dockerfile as it is or a generated one, built with
whichever builder works here (docker, podman, buildah), optionally pushed."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

__all__ = ["register"]


def build(
    spec_file: Path = typer.Argument(..., help="Job spec (any format); its directory holds the Dockerfile, if any."),
    tag: Optional[str] = typer.Option(None, "--tag", "-t", help="Image name: default the spec's `image`, else "
                                      "<job name>:latest."),
    push: bool = typer.Option(False, "--push", help="Push the image to its registry (the engine's credentials; "
                              "Application Default Credentials for Artifact Registry and gcr.io)."),
    dockerfile: Optional[Path] = typer.Option(None, "--dockerfile", help="Build this Dockerfile as it is (default: "
                                              "the spec directory's Dockerfile, else a generated one)."),
    base: Optional[str] = typer.Option(None, "--base", help="Base of a generated Dockerfile: an image with Python "
                                       "(default tensorflow/tensorflow:<local TensorFlow version>)."),
    pull: str = typer.Option("missing", "--pull", help="Pull the base image: missing | never | always."),
    engine: Optional[str] = typer.Option(None, "--engine", help="docker | podman | buildah (default: the first "
                                         "that works here)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="Force the spec format: native|vertex|aiplatform|tfjob|jobset (default: detected from the file)."),
    print_dockerfile: bool = typer.Option(False, "--print-dockerfile", help="Print the Dockerfile that would be "
                                          "built and exit."),
) -> None:
    """Build the job's image: its Dockerfile, or one with a base matching the local TensorFlow, tf-keras,
    multiworker and the job's working directory in /app. Run it with `multiworker run SPEC --containers`.

    Exit codes: 0 built (and pushed), 2 bad input or a failed build or push.
    """
    from multiworker.cli.run_cmd import load_from_cli
    from multiworker.containers.engine import BUILDERS, find_engine
    from multiworker.containers.images import build_image, default_tag, plan_build, push_image, staging_dir
    from multiworker.errors import UserError

    if pull not in ("missing", "never", "always"):
        raise UserError(f"--pull {pull}: choose missing, never or always")
    loaded = load_from_cli(spec_file, fmt, [], [], None, [], local=False, containers=True)
    spec = loaded.spec
    primary = next(iter(spec.replica_counts()))
    image = spec.image or next((spec.resolved(r).image for r in spec.replica_counts() if spec.resolved(r).image), None)
    tag = tag or default_tag(spec.name, image)
    workdir = loaded.resolve(spec.resolved(primary).working_dir)
    with staging_dir() as staging:
        plan = plan_build(spec_dir=loaded.base_dir, workdir=workdir, dockerfile=dockerfile, base=base,
                          staging=Path(staging))
        if print_dockerfile:
            typer.echo(plan.dockerfile.read_text(), nl=False)
            return
        builder = find_engine(BUILDERS, purpose="build images", name=engine)
        used, took = build_image(plan, tag, engine=builder, pull=pull, log=typer.echo)
    typer.echo(f"built {tag} with {used.name} in {took:.0f}s")
    if push:
        push_image(used, tag)
        typer.echo(f"pushed {tag}")
    typer.echo(f"run it: multiworker run {spec_file} --containers" + ("" if tag == image else f" --image {tag}"))


def register(app: typer.Typer) -> None:
    app.command()(build)
