"""Load a job of any format into a validated native spec that runs on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multiworker.spec.formats.common import Parsed
from multiworker.spec.formats.localize import PathMap, localize, parse_images
from multiworker.spec.formats.parse import parse_job
from multiworker.spec.load import (
    DEFAULT_MAX_REPLICAS,
    LoadedSpec,
    apply_overrides,
    check_programs,
    check_replica_cap,
    spec_from_dict,
)
from multiworker.store import home_dir

__all__ = ["load_job", "load_parsed"]


def load_job(
    path: str | Path,
    *,
    format: str | None = None,
    overrides: tuple[str, ...] | list[str] = (),
    images: tuple[str, ...] | list[str] = (),
    dockerfile: str | None = None,
    map_paths: tuple[str, ...] | list[str] = (),
    check: bool = True,
    cwd: str | Path | None = None,
    max_replicas: int = DEFAULT_MAX_REPLICAS,
    data: Any = None,
    unpack: bool = True,
) -> LoadedSpec:
    """Load a job spec of any format into a validated native spec that runs on this machine.

    Detects the format (or takes ``format``), applies ``--set`` overrides (native field paths), maps
    images to local programs (``images``: IMAGE=COMMAND, or ``dockerfile``), Cloud Storage paths to
    local dirs (``map_paths``: gs://bucket=./dir, relative to ``cwd``) and Python packages to a path.
    With ``check`` (the default) an unmapped image or gs:// path is an error and every program must
    exist; without it they are left as they are. ``data``: the job already read (e.g. a tuning job's
    trialJobSpec), instead of reading ``path``, which still names it and anchors relative paths.
    """
    path = Path(path)
    parsed = parse_job(path, format=format, data=data)
    return load_parsed(parsed, source=str(path), path=path, base_dir=path.resolve().parent, overrides=overrides,
                       images=images, dockerfile=dockerfile, map_paths=map_paths, check=check, cwd=cwd,
                       max_replicas=max_replicas, unpack=unpack)


def load_parsed(
    parsed: Parsed,
    *,
    source: str,
    path: Path | None,
    base_dir: Path,
    overrides: tuple[str, ...] | list[str] = (),
    images: tuple[str, ...] | list[str] = (),
    dockerfile: str | None = None,
    map_paths: tuple[str, ...] | list[str] = (),
    check: bool = True,
    cwd: str | Path | None = None,
    max_replicas: int = DEFAULT_MAX_REPLICAS,
    unpack: bool = True,
) -> LoadedSpec:
    """``load_job`` for a job already read (a file, or a gcloud command line): overrides, mappings, checks."""
    cwd = Path(cwd) if cwd is not None else Path.cwd()
    native = parsed.native
    if overrides:
        native = apply_overrides(native, overrides)
    spec_from_dict(native, source=source)  # the shape first: localizing walks a well-formed document only
    native, notes = localize(
        native,
        parsed,
        images=parse_images(images),
        dockerfile=dockerfile,
        paths=PathMap(map_paths, cwd=cwd),
        source=source,
        cwd=cwd,
        home=home_dir(),
        strict=check,
        unpack=unpack,
    )
    spec = spec_from_dict(native, source=source)
    loaded = LoadedSpec(
        spec=spec,
        path=path,
        base_dir=base_dir,
        format=parsed.format,
        notes=tuple(dict.fromkeys(parsed.all_notes() + notes)),
    )
    check_replica_cap(loaded, max_replicas)
    if check:
        check_programs(loaded, archives_checked=not unpack)
    return loaded
