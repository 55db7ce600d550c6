"""Metric lines to the launcher: the one place the trainer library writes to stdout."""

from __future__ import annotations

import sys
from typing import Any

from multiworker.metrics_line import format_metric

__all__ = ["emit"]


def emit(kind: str, **fields: Any) -> None:
    """Print one ``MULTIWORKER_METRIC`` line (kinds: progress, epoch, eval, final), flushed at once."""
    print(format_metric(kind, **fields), file=sys.stdout, flush=True)
