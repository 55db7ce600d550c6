"""``multiworker gcloud ...``: run a pasted gcloud training command here, as ``multiworker run`` runs a config."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

__all__ = ["register", "gcloud"]

_HELP = """Run a gcloud training command here: paste it after `multiworker`, add local mappings.

\b
multiworker gcloud ai custom-jobs create --display-name J --worker-pool-spec=... --map-path gs://B=./gcs
multiworker gcloud ai custom-jobs local-run --executor-image-uri IMG --python-module trainer.task -- --epochs 2
multiworker gcloud ai-platform jobs submit training JOB --config config.yaml --master-image-uri IMG --dockerfile Dockerfile -- trainer/task.py --bucket B
multiworker gcloud ai-platform jobs submit training JOB --master-image-uri IMG --containers -- --epochs 2

The job gets the environment that command would give it on the cloud (TF_CONFIG, CLUSTER_SPEC, AIP_*); flags override the --config file as in gcloud. A leading `gcloud` word is optional.

Local options on the same line, before any `--`, as for `run`: --image IMAGE=COMMAND, --dockerfile PATH, --map-path gs://BUCKET=DIR, --set FIELD=VALUE, --inject-failure ROLE-INDEX@WHEN[:SIGNAL], -q/--quiet, -v/--verbose, -d/--detach; --containers [--pull never] runs the command's images as containers (docs/containers.md). Exit codes as for `run`.
"""


def gcloud(
    line: Optional[list[str]] = typer.Argument(
        None, metavar="[gcloud] COMMAND...", help="ai custom-jobs create|local-run, or ai-platform jobs submit training."
    ),
) -> None:
    from multiworker.cli.run_cmd import run_loaded
    from multiworker.spec.formats.gcloud import load_command

    loaded, job = load_command(list(line or []), cwd=Path.cwd())
    opts = job.local
    backend, options = "local", None
    if opts.get("containers"):  # every replica a container of the command's image (docs/containers.md)
        from multiworker.backends.base import get_backend
        from multiworker.errors import UserError

        if opts.get("dockerfile") or any("=" in i for i in opts.get("image", [])) or len(opts.get("image", [])) > 1:
            raise UserError("--containers: the command's images run as they are; give at most one --image IMAGE "
                            "(the image of pools without one), no IMAGE=COMMAND or --dockerfile")
        mounts = [str((Path.cwd() / m.partition("=")[2].strip()).resolve()) for m in opts.get("map-path", [])]
        raw = {"image": (opts.get("image") or [None])[0], "pull": opts.get("pull"), "mounts": ",".join(mounts) or None}
        backend = "containers"
        options = get_backend(backend).options({k: v for k, v in raw.items() if v}).model_dump(exclude_unset=True)
    raise typer.Exit(run_loaded(loaded, trainer_args=[], inject_failures=opts.get("inject-failure", []),
                                detach=bool(opts.get("detach")), quiet=bool(opts.get("quiet")),
                                verbose=bool(opts.get("verbose")), backend=backend, options=options))


def register(app: typer.Typer) -> None:
    # Everything after `gcloud` is the pasted line, `--` included: stop option parsing at its first word.
    app.command(help=_HELP, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})(gcloud)
