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

The job gets the environment that command would give it on the cloud (TF_CONFIG, CLUSTER_SPEC, AIP_*); flags override the --config file as in gcloud. A leading `gcloud` word is optional.

Local options on the same line, before any `--`, as for `run`: --image IMAGE=COMMAND, --dockerfile PATH, --map-path gs://BUCKET=DIR, --set FIELD=VALUE, --inject-failure ROLE-INDEX@WHEN[:SIGNAL], -q/--quiet, -v/--verbose, -d/--detach. Exit codes as for `run`.
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
    raise typer.Exit(run_loaded(loaded, trainer_args=[], inject_failures=opts.get("inject-failure", []),
                                detach=bool(opts.get("detach")), quiet=bool(opts.get("quiet")),
                                verbose=bool(opts.get("verbose"))))


def register(app: typer.Typer) -> None:
    # Everything after `gcloud` is the pasted line, `--` included: stop option parsing at its first word.
    app.command(help=_HELP, context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})(gcloud)
