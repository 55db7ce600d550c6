"""Read a job file of any format into a native spec dict, cloud paths and images untouched."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from multiworker.errors import SpecError
from multiworker.spec.formats import aiplatform, jobset, tfjob, vertex
from multiworker.spec.formats.common import Parsed
from multiworker.spec.formats.detect import FORMATS, detect
from multiworker.spec.load import read_yaml

__all__ = ["parse_job", "READERS"]

# Format -> its reader (native needs none: it is already a native spec dict).
READERS: dict[str, Callable[..., Parsed]] = {
    "vertex": vertex.parse, "aiplatform": aiplatform.parse, "tfjob": tfjob.parse, "jobset": jobset.parse,
}


def parse_job(path: str | Path, *, format: str | None = None, data: Any = None) -> Parsed:
    """Read a job file of any format into a native spec dict, cloud paths and images untouched.

    ``data``: the document already read (``path`` still names it and anchors relative paths).
    """
    path = Path(path)
    source = str(path)
    if data is None:
        data = read_yaml(path)
    if format is not None and format not in FORMATS:
        raise SpecError(f"format {format!r} is not supported; use one of {', '.join(FORMATS)}", source="--format")
    fmt = format or detect(data, source=source)
    if fmt == "native":
        if not isinstance(data, dict):
            raise SpecError("a job spec is a YAML mapping with at least `name` and `pools`", source=source)
        return Parsed(format="native", native=data)
    return READERS[fmt](data, source=source, path=path)
