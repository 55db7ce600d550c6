"""The one-line protocol replicas use to report progress and metrics to the launcher.

A replica prints ``MULTIWORKER_METRIC {json}`` on stdout. The JSON always has ``kind``:

- ``progress``: ``epoch`` (1-based), ``epochs``, ``step``, ``steps`` (may be null)
- ``epoch``: ``epoch``, ``epochs``, ``loss`` and other Keras logs, ``images_per_sec``, ``seconds``
- ``eval``: metrics of an evaluation (evaluator replicas), with ``checkpoint`` and ``step``
- ``final``: end-of-training results (e.g. ``test_accuracy``)

Standard library only: it is imported inside replicas too.
"""

from __future__ import annotations

import json
import math
from typing import Any

PREFIX = "MULTIWORKER_METRIC "
KINDS = ("progress", "epoch", "eval", "final")

__all__ = ["PREFIX", "KINDS", "BadMetric", "format_metric", "parse_metric", "validate_metric"]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item"):  # numpy / tf scalars
        try:
            return _clean(value.item())
        except (TypeError, ValueError):
            return str(value)
    return value


def format_metric(kind: str, **fields: Any) -> str:
    """Render one metric line (without newline)."""
    if kind not in KINDS:
        raise ValueError(f"unknown metric kind {kind!r}; expected one of {KINDS}")
    payload = {"kind": kind, **{k: _clean(v) for k, v in fields.items()}}
    return PREFIX + json.dumps(payload, sort_keys=True, default=str)


# Fields with a fixed type (stored in typed columns, formatted as numbers); others are free JSON.
_INT_FIELDS = ("epoch", "epochs", "step", "steps")
_NUMBER_FIELDS = ("images_per_sec", "steps_per_sec", "seconds", "loss")


class BadMetric(ValueError):
    """A ``MULTIWORKER_METRIC`` line that is not valid; the message says what is wrong."""


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def validate_metric(payload: Any) -> dict[str, Any]:
    """The payload if it is a well-formed metric, else :class:`BadMetric` naming the field."""
    if not isinstance(payload, dict):
        raise BadMetric("the JSON is not an object")
    if payload.get("kind") not in KINDS:
        raise BadMetric(f"kind {payload.get('kind')!r} is not one of {', '.join(KINDS)}")
    for key, value in payload.items():
        if value is None or key == "kind":
            continue
        if key in _INT_FIELDS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
            want = "a whole number >= 0"
        elif key in _NUMBER_FIELDS:
            ok, want = _is_number(value), "a finite number"
        else:  # Keras logs and free-form results (a `final` may carry class names): any JSON value
            continue
        if not ok:
            raise BadMetric(f"{key} is {json.dumps(value)[:40]}, not {want}")
    return payload


def parse_metric(line: str, *, strict: bool = False) -> dict[str, Any] | None:
    """Return the metric dict if ``line`` is a well-formed metric line, else None.

    With ``strict``, a line that carries the prefix but is malformed raises :class:`BadMetric`
    instead, so the launcher can warn once rather than silently drop it.
    """
    idx = line.find(PREFIX)
    if idx < 0:
        return None
    try:
        return validate_metric(json.loads(line[idx + len(PREFIX):]))
    except (json.JSONDecodeError, RecursionError) as exc:
        if strict:
            raise BadMetric(f"not JSON: {exc}") from None
        return None
    except BadMetric:
        if strict:
            raise
        return None
