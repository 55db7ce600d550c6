"""``multiworker data ...``: prepare training data (image folders -> TFRecord shards)."""

from __future__ import annotations

import logging
from pathlib import Path

import typer

__all__ = ["register"]

log = logging.getLogger(__name__)

data_app = typer.Typer(help="Prepare training data.", no_args_is_help=True)


@data_app.command("tfrecords")
def tfrecords(
    src: str = typer.Argument(..., help="Folder of class sub-folders (SRC/<class>/<image>); any tf.io.gfile path."),
    dst: str = typer.Argument(..., help="Output folder for the shards and manifest.json; any tf.io.gfile path."),
    size: int = typer.Option(224, "--size", help="Side in pixels of the square output images."),
    shards: int = typer.Option(2, "--shards", help="Shards per split (at most one per record)."),
    augment: int = typer.Option(0, "--augment", help="Extra augmented copies of each training image."),
    val_split: float = typer.Option(0.2, "--val-split", help="Fraction of each class held out for validation."),
    seed: int = typer.Option(0, "--seed", help="Seed of the split, the shard order and the augmentation."),
    workers: int = typer.Option(0, "--workers", help="Parallel decoders (0: one per CPU core)."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON, without a progress bar."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show TensorFlow's start-up log lines."),
) -> None:
    """Resize (and augment) images once into sharded TFRecords with a manifest."""
    import json

    from multiworker.cli.tf_quiet import import_tensorflow

    import_tensorflow(verbose=verbose)

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TimeRemainingColumn,
    )
    from rich.table import Table

    if "://" not in src:
        src = str(Path(src).expanduser())
    if "://" not in dst:
        dst = str(Path(dst).expanduser().absolute())

    from multiworker.data.tfrecords import images_to_tfrecords

    console = Console(stderr=True)
    kwargs = dict(size=size, shards=shards, augment=augment, val_split=val_split, seed=seed,
                  workers=workers or None)
    if as_json:
        result = images_to_tfrecords(src, dst, **kwargs)
    else:
        with Progress(
            "[progress.description]{task.description}", BarColumn(), MofNCompleteColumn(),
            TimeRemainingColumn(), console=console, transient=True,
        ) as bar:
            task = bar.add_task("converting", total=None)
            result = images_to_tfrecords(
                src, dst, progress=lambda done, total: bar.update(task, completed=done, total=total),
                **kwargs,
            )
    if as_json:
        typer.echo(json.dumps({
            "dst": result.dst, "manifest": result.manifest_path, "classes": result.classes,
            "counts": result.counts, "source_images": result.sources, "shards": result.shards,
            "skipped": [{"file": f, "reason": r} for f, r in result.skipped],
            "seconds": round(result.seconds, 2),
        }, indent=2))
        return
    table = Table(title=f"{result.dst} ({len(result.classes)} classes, {size}x{size})")
    for col in ("split", "source images", "records", "shards"):
        table.add_column(col)
    for split in ("train", "val"):
        table.add_row(split, str(result.sources.get(split, 0)), str(result.counts.get(split, 0)),
                      str(len(result.shards.get(split, []))))
    Console().print(table)
    if result.skipped:
        console.print(f"[yellow]skipped {len(result.skipped)} file(s) that are not readable images:[/]")
        for name, reason in result.skipped:
            console.print(f"  {name}: {reason}", markup=False, highlight=False)
    console.print(f"manifest: {result.manifest_path} ({result.seconds:.1f}s)")


def register(app: typer.Typer) -> None:
    """Add the ``data`` command group to the main app."""
    app.add_typer(data_app, name="data")
