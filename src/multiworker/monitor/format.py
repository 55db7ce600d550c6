"""Small human formats shared by the monitoring commands."""

from __future__ import annotations

from multiworker.metrics_line import RATE_UNITS, metric_values
from multiworker.spec.model import format_duration

__all__ = ["fmt_bytes", "fmt_duration", "fmt_metrics", "headline_metrics", "format_position", "format_progress",
           "format_values", "STATE_STYLES"]

STATE_STYLES = {
    "Running": "cyan", "Restarting": "yellow", "Pending": "dim", "Succeeded": "green", "Failed": "red",
    "Cancelled": "yellow", "Lost": "bold red", "Stopped": "dim",
}


def fmt_bytes(n: float | None) -> str:
    """1536 -> '1.5 KiB'; None -> '-'."""
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def fmt_duration(seconds: float | None) -> str:
    """90 -> '1m30s'; None -> '-'."""
    return "-" if seconds is None else format_duration(max(0.0, seconds))


# Quality metrics worth a line whatever else a final result holds (also any test_/eval_/val_ metric).
_QUALITY_KEYS = ("loss", "accuracy", "rmse", "mae", "auc")


def headline_metrics(data: dict | None) -> dict:
    """The numbers of an eval/final metric worth one line: quality and throughput, never bookkeeping
    (all its :func:`~multiworker.metrics_line.metric_values` when none looks like a quality metric)."""
    numbers = metric_values(data)
    chosen = {k: v for k, v in numbers.items()
              if k in _QUALITY_KEYS or k in RATE_UNITS
              or k.startswith(("test_", "eval_", "val_")) and not k.endswith("_seconds")}
    return chosen or numbers


def format_position(metric: dict | None) -> str:
    """Where a metric was recorded, from its bookkeeping: 'epoch 2/5', 'epoch 3  step 1200'."""
    metric = metric or {}
    parts = []
    for key, total in (("epoch", "epochs"), ("step", "steps")):
        if metric.get(key) is not None:
            parts.append(f"{key} {metric[key]}" + (f"/{metric[total]}" if metric.get(total) else ""))
    return "  ".join(parts)


def format_values(values: dict) -> str:
    """'loss 0.1234  accuracy 0.9812  1,234 images/s': metrics first, throughputs last with their unit."""
    parts = [f"{k} {v:.4g}" for k, v in values.items() if k not in RATE_UNITS]
    parts += [f"{values[k]:,.0f} {unit}" for k, unit in RATE_UNITS.items() if values.get(k)]
    return "  ".join(parts)


def fmt_metrics(data: dict | None) -> str:
    """'epoch 3  step 1200  test_accuracy 0.9669  test_loss 0.1089' from an eval/final metric dict."""
    return "  ".join(p for p in (format_position(data), format_values(headline_metrics(data))) if p)


def format_progress(metric: dict) -> str:
    """'epoch 2/5  loss 0.1234  accuracy 0.9812  1,234 images/s' from an epoch metric."""
    return "  ".join(p for p in (format_position(metric), format_values(metric_values(metric))) if p)
