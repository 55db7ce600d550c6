"""Load a job of any format into a validated native spec that runs on this machine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from multiworker.home import home_dir
from multiworker.spec.formats.common import Parsed
from multiworker.spec.formats.localize import PathMap, localize
from multiworker.spec.formats.options import LoadOptions
from multiworker.spec.formats.parse import parse_job
from multiworker.spec.load import (
    LoadedSpec,
    apply_overrides,
    check_programs,
    check_replica_cap,
    spec_from_dict,
)

__all__ = ["load_job", "load_parsed"]


def load_job(path: str | Path, options: LoadOptions | None = None, *, data: Any = None) -> LoadedSpec:
    """Load a job spec of any format into a validated native spec that runs on this machine.

    Detects the format (or takes ``options.format``), applies ``--set`` overrides (native field paths),
    maps images to local programs (``IMAGE=COMMAND``, or a Dockerfile), Cloud Storage paths to local
    dirs and Python packages to a path; see :class:`LoadOptions`. ``data``: the job already read (e.g.
    a tuning job's trialJobSpec), instead of reading ``path``, which still names it and anchors
    relative paths.
    """
    options = options or LoadOptions()
    path = Path(path)
    parsed = parse_job(path, format=options.format, data=data)
    return load_parsed(parsed, options, source=str(path), path=path, base_dir=path.resolve().parent)


def load_parsed(parsed: Parsed, options: LoadOptions | None = None, *, source: str, path: Path | None,
                base_dir: Path) -> LoadedSpec:
    """``load_job`` for a job already read (a file, or a gcloud command line): overrides, mappings, checks."""
    options = options or LoadOptions()
    native = parsed.native
    if options.overrides:
        native = apply_overrides(native, options.overrides)
    spec_from_dict(native, source=source)  # the shape first: localizing walks a well-formed document only
    native, notes = localize(native, parsed, options, source=source, home=home_dir())
    spec = spec_from_dict(native, source=source)
    loaded = LoadedSpec(
        spec=spec,
        path=path,
        base_dir=base_dir,
        format=parsed.format,
        notes=tuple(dict.fromkeys(parsed.all_notes() + notes)),
        map_paths=tuple(f"{cloud}={local}" for cloud, local in PathMap(options.map_paths, cwd=options.directory()).pairs)
        if options.check else (),
    )
    check_replica_cap(loaded, options.max_replicas)
    if options.check:
        check_programs(loaded, archives_checked=not options.unpack)
    return loaded
