"""The one-line protocol replicas use to report progress and metrics to the launcher.

A replica prints ``MULTIWORKER_METRIC {json}`` on stdout. The JSON always has ``kind``:

- ``progress``: ``epoch`` (1-based), ``epochs``, ``step``, ``steps`` (may be null)
- ``epoch``: ``epoch``, ``epochs``, ``steps``, ``loss`` and other Keras logs, ``images_per_sec``,
  ``seconds``, and ``start_step`` when the epoch resumed mid-way from a backup
- ``eval``: metrics of an evaluation (evaluator replicas), with ``checkpoint``, ``epoch``, ``step``
  and ``seconds``
- ``final``: end-of-training results (e.g. ``test_accuracy``)

Which keys are metrics is decided here too, for every reader (console, status, plot, dashboard):
:data:`BOOKKEEPING_KEYS` say where and when a line was recorded and are never a metric;
:data:`RATE_KEYS` are shown beside the metrics but never drawn as a metric curve; every other
number is a metric (:func:`metric_values`, :func:`curve_values`).

Standard library only: it is imported inside replicas too.
"""

from __future__ import annotations

import json
import math
from typing import Any

PREFIX = "MULTIWORKER_METRIC "
KINDS = ("progress", "epoch", "eval", "final")

__all__ = ["PREFIX", "KINDS", "BOOKKEEPING_KEYS", "RATE_KEYS", "RATE_UNITS", "BadMetric", "curve_values",
           "format_metric", "metric_values", "parse_metric", "validate_metric"]

# Where and when a line was recorded: never a metric, never drawn. Key -> why.
_BOOKKEEPING = {
    "kind": "which of KINDS the line is",
    "epoch": "the 1-based epoch the line belongs to (eval: the evaluated checkpoint's epoch)",
    "epochs": "how many epochs the run was asked for",
    "step": "progress: steps done in the epoch; eval: the optimizer step of the checkpoint",
    "steps": "steps per epoch (progress: null when unknown)",
    "start_step": "the 0-based step a resumed epoch started at (from a mid-epoch backup)",
    "seconds": "wall time of the epoch or the evaluation",
    "time": "a timestamp",
    "checkpoint": "eval: the path of the checkpoint evaluated",
    "attempt": "which attempt of the group wrote the line",
    "epochs_run": "final: how many epochs this run trained (the examples report it)",
}
BOOKKEEPING_KEYS: frozenset[str] = frozenset(_BOOKKEEPING)

# Rates reported beside the metrics: shown (throughput with its unit), never drawn as a metric curve
# (another scale, and not a quality of the model). Key -> why.
_RATES = {
    "images_per_sec": "throughput of the epoch: global batch size x steps run / seconds",
    "steps_per_sec": "progress rate of the training loop",
    "lr": "the optimizer's learning rate (Keras logs it under a learning-rate schedule)",
    "learning_rate": "the same, under its other Keras name",
}
RATE_KEYS: frozenset[str] = frozenset(_RATES)
# How a throughput is written next to the metrics ("1,234 images/s"); other rates read "lr 0.001".
RATE_UNITS = {"images_per_sec": "images/s", "steps_per_sec": "steps/s"}


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
_INT_MAX = (1 << 63) - 1  # the store's INTEGER columns hold no more


class BadMetric(ValueError):
    """A ``MULTIWORKER_METRIC`` line that is not valid; the message says what is wrong."""


def _is_number(value: Any) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return abs(value) <= _INT_MAX  # a larger int is no float either (math.isfinite would overflow)
    return isinstance(value, float) and math.isfinite(value)


def metric_values(data: dict[str, Any] | None) -> dict[str, float]:
    """The numbers of a metric that may be shown as its values: finite, not bool, not bookkeeping
    (rates included), in the metric's order."""
    return {k: v for k, v in (data or {}).items() if k not in BOOKKEEPING_KEYS and _is_number(v)}


def curve_values(data: dict[str, Any] | None) -> dict[str, float]:
    """The numbers of a metric that may be drawn as curves: :func:`metric_values` without the rates."""
    return {k: v for k, v in metric_values(data).items() if k not in RATE_KEYS}


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
            ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT_MAX
            want = "a whole number from 0 to 2^63-1"
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
