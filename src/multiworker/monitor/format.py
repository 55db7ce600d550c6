"""Small human formats shared by the monitoring commands."""

from __future__ import annotations

from multiworker.spec.model import format_duration

__all__ = ["fmt_bytes", "fmt_duration", "fmt_metrics", "headline_metrics", "format_progress",
           "STATE_STYLES"]

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


_HEADLINE_KEYS = {"loss", "accuracy", "rmse", "mae", "auc", "images_per_sec", "step", "epochs_run"}


def headline_metrics(data: dict | None) -> dict:
    """The numbers of an eval/final metric worth one line: quality and throughput, not bookkeeping
    (all numbers when none of them looks like a quality metric)."""
    numbers = {k: v for k, v in (data or {}).items()
               if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("kind", "attempt")}
    chosen = {k: v for k, v in numbers.items()
              if k in _HEADLINE_KEYS or k.startswith(("test_", "eval_", "val_")) and not k.endswith("_seconds")}
    return chosen or numbers


def fmt_metrics(data: dict | None) -> str:
    """'test_accuracy 0.9669  test_loss 0.1089' from a metric dict."""
    return "  ".join(f"{k} {v:.4g}" for k, v in headline_metrics(data).items())


_SKIP_KEYS = {"kind", "epoch", "epochs", "step", "steps", "seconds", "images_per_sec", "time"}


def format_progress(metric: dict) -> str:
    """'epoch 2/5  loss 0.1234  accuracy 0.9812  1,234 images/s' from an epoch metric."""
    parts = []
    if metric.get("epoch") is not None:
        total = f"/{metric['epochs']}" if metric.get("epochs") else ""
        parts.append(f"epoch {metric['epoch']}{total}")
    for key, value in metric.items():
        if key in _SKIP_KEYS or not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        parts.append(f"{key} {value:.4g}")
    if metric.get("images_per_sec"):
        parts.append(f"{metric['images_per_sec']:,.0f} images/s")
    return "  ".join(parts)
