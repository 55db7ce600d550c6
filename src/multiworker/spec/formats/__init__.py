"""Job spec formats: native YAML now; cloud formats (Vertex, AI Platform, TFJob) plug in here."""

from __future__ import annotations

from pathlib import Path

from multiworker.errors import SpecError
from multiworker.spec.load import LoadedSpec, load_spec

__all__ = ["FORMATS", "load_job"]

FORMATS = ("native",)


def load_job(
    path: str | Path,
    *,
    format: str | None = None,
    overrides: tuple[str, ...] | list[str] = (),
    images: tuple[str, ...] | list[str] = (),
    dockerfile: str | None = None,
    map_paths: tuple[str, ...] | list[str] = (),
    check: bool = True,
) -> LoadedSpec:
    """Load a job spec of any supported format into a validated native spec."""
    if format not in (None, "native"):
        raise SpecError(f"format {format!r} is not supported; use one of {', '.join(FORMATS)}", source=str(path))
    return load_spec(path, overrides=overrides, check=check)
