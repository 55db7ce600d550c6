"""Validate a converted job against the target's published schema (copies in multiworker/schemas)."""

from __future__ import annotations

import functools
import json
from importlib import resources

from multiworker.errors import SpecError, UserError

__all__ = ["SCHEMAS", "check_schema", "load_schema"]

SCHEMAS = {
    "tfjob": ("tfjob.schema.json", "the Kubeflow TFJob CRD"),
    "jobset": ("jobset.schema.json", "the JobSet CRD"),
    "vertex": ("vertex_customjob.schema.json", "the Vertex AI CustomJob schema"),
}


@functools.cache
def load_schema(fmt: str) -> dict:
    name, _ = SCHEMAS[fmt]
    return json.loads(resources.files("multiworker").joinpath("schemas", name).read_text(encoding="utf-8"))


def check_schema(doc: dict, fmt: str, *, source: str) -> None:
    """Raise a one-line SpecError naming the first field of ``doc`` the schema rejects."""
    if fmt not in SCHEMAS:
        return
    try:
        import jsonschema
    except ImportError as exc:  # pragma: no cover - jsonschema ships with the dev extra
        raise UserError(
            f"converting to {fmt} validates against {SCHEMAS[fmt][1]}, which needs jsonschema: "
            "pip install jsonschema (or 'multiworker[dev]')"
        ) from exc
    validator = jsonschema.Draft7Validator(load_schema(fmt))
    error = jsonschema.exceptions.best_match(validator.iter_errors(doc))
    if error is None:
        return
    field = ""
    for part in error.absolute_path:
        field += f"[{part}]" if isinstance(part, int) else (f".{part}" if field else str(part))
    raise SpecError(f"{error.message} ({SCHEMAS[fmt][1]})", source=source, field=field or None)
