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

__all__ = ["PREFIX", "KINDS", "format_metric", "parse_metric"]


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


def parse_metric(line: str) -> dict[str, Any] | None:
    """Return the metric dict if ``line`` is a metric line, else None."""
    idx = line.find(PREFIX)
    if idx < 0:
        return None
    try:
        payload = json.loads(line[idx + len(PREFIX):])
    except json.JSONDecodeError:
        return None
    if not isinstance(payload, dict) or payload.get("kind") not in KINDS:
        return None
    return payload
