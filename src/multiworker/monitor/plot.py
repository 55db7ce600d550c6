"""``multiworker plot``: what the cloud consoles chart, drawn with matplotlib (Agg, no display):
loss and the other metrics per epoch, CPU and memory per replica over time."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from multiworker.errors import UserError
from multiworker.job import Store
from multiworker.metrics_line import curve_values

__all__ = ["PlotResult", "collect_series", "draw", "plot_job", "FORMATS"]

log = logging.getLogger(__name__)

FORMATS = ("png", "svg", "pdf")
_MIB = 1024 * 1024


@dataclasses.dataclass
class PlotResult:
    """Where the figure went, and per panel title the (label -> [[x, y], ...]) lines it holds."""

    path: Path
    drawn: dict[str, dict[str, list[list[float]]]]
    figure: Any = dataclasses.field(repr=False, default=None)


def collect_series(store: Store, job_id: str) -> dict:
    """The job's curves: per-epoch metrics by replica (a restarted epoch keeps its latest value), and
    CPU % and memory (MiB) per replica against seconds since the job started. Only a metric's
    :func:`~multiworker.metrics_line.curve_values` are curves (no epoch, start_step, images/s...)."""
    job = store.get_job(job_id)
    t0 = job.started_at or job.created_at
    per_epoch: dict[str, dict[str, dict[int, float]]] = {}
    for row in store.metrics(job_id, "epoch"):
        if row["epoch"] is None:
            continue
        for key, value in curve_values(row["data"]).items():
            per_epoch.setdefault(key, {}).setdefault(row["replica"], {})[int(row["epoch"])] = float(value)
    cpu: dict[str, list[list[float]]] = {}
    memory: dict[str, list[list[float]]] = {}
    for s in store.samples(job_id):
        t = round(s["ts"] - t0, 3)
        if s["cpu_percent"] is not None:
            cpu.setdefault(s["replica"], []).append([t, float(s["cpu_percent"])])
        if s["rss_bytes"] is not None:
            memory.setdefault(s["replica"], []).append([t, round(s["rss_bytes"] / _MIB, 3)])
    return {
        "id": job.id,
        "name": job.name,
        "state": job.state,
        "epoch_metrics": {k: {r: sorted([e, v] for e, v in by.items()) for r, by in reps.items()}
                          for k, reps in sorted(per_epoch.items())},
        "cpu_percent": cpu,
        "memory_mib": memory,
        "restarts_at": [round(e["ts"] - t0, 3) for e in store.events(job_id) if e["reason"] == "Restarting"],
    }


def _epoch_panel(ax, title: str, metrics: dict[str, dict[str, list]]) -> None:
    ax.set_title(title)
    ax.set_xlabel("epoch")
    several = any(len(reps) > 1 for reps in metrics.values())
    for metric, reps in metrics.items():
        for replica, points in reps.items():
            xs, ys = zip(*points)
            ax.plot(xs, ys, marker="o", label=f"{metric} ({replica})" if several else metric)
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _finish(ax)


def _time_panel(ax, title: str, ylabel: str, lines: dict[str, list], restarts: list[float]) -> None:
    ax.set_title(title)
    ax.set_xlabel("seconds since start")
    ax.set_ylabel(ylabel)
    for replica, points in sorted(lines.items()):
        xs, ys = zip(*points)
        ax.plot(xs, ys, label=replica)
    for i, t in enumerate(restarts):  # axvline is a Line2D too; keep it out of the legend's curves
        ax.axvline(t, color="grey", linestyle="--", linewidth=1, label="_restart" if i else "restart")
    _finish(ax)


def _finish(ax) -> None:
    if ax.get_lines():
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="grey")


def draw(series: dict):
    """A 2x2 matplotlib Figure of the series (no pyplot: no global state, no display)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 8), layout="constrained")
    (ax_loss, ax_metrics), (ax_cpu, ax_mem) = fig.subplots(2, 2)
    metrics = series["epoch_metrics"]
    losses = {k: v for k, v in metrics.items() if "loss" in k}
    others = {k: v for k, v in metrics.items() if "loss" not in k}
    _epoch_panel(ax_loss, "Loss per epoch", losses)
    accuracy_only = others and all("acc" in k for k in others)
    _epoch_panel(ax_metrics, "Accuracy per epoch" if accuracy_only else "Metrics per epoch", others)
    _time_panel(ax_cpu, "CPU per replica", "CPU %", series["cpu_percent"], series["restarts_at"])
    _time_panel(ax_mem, "Memory per replica", "RSS (MiB)", series["memory_mib"], series["restarts_at"])
    fig.suptitle(f"{series['name']} ({series['id']}): {series['state']}")
    return fig


def drawn_lines(fig) -> dict[str, dict[str, list[list[float]]]]:
    """Read the curves back from a figure: panel title -> label -> points (restart markers left out)."""
    out: dict[str, dict[str, list[list[float]]]] = {}
    for ax in fig.axes:
        lines = {ln.get_label(): ln.get_xydata().tolist() for ln in ax.get_lines()
                 if ln.get_label().lstrip("_") != "restart"}
        out[ax.get_title()] = lines
    return out


def plot_job(store: Store, job_id: str, path: str | Path) -> PlotResult:
    """Draw the job's charts into ``path`` (.png, .svg or .pdf)."""
    path = Path(path)
    fmt = path.suffix.lstrip(".").lower()
    if fmt not in FORMATS:
        raise UserError(f"{path}: cannot tell the image format; end the file name in {', '.join('.' + f for f in FORMATS)}")
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise UserError("plot needs matplotlib; install it with `pip install 'multiworker[plot]'`") from exc
    fig = draw(collect_series(store, job_id))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format=fmt, dpi=100)
    log.info("wrote %s", path)
    return PlotResult(path=path, drawn=drawn_lines(fig), figure=fig)
