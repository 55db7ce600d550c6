"""A study's results: one row per trial (state, parameters, metric, job), the best trial, and a
plot of the metric against each parameter (matplotlib, Agg)."""

from __future__ import annotations

import math
from pathlib import Path

from multiworker.errors import UserError
from multiworker.tune import search

__all__ = ["trial_rows", "best_row", "plot_study", "STATES"]

# Optuna's trial states in the words the cloud consoles use.
STATES = {"COMPLETE": "Succeeded", "PRUNED": "Stopped early", "FAIL": "Failed", "RUNNING": "Running",
          "WAITING": "Queued"}


def trial_rows(ostudy) -> list[dict]:
    """Every trial, in order: number (1-based, the cloud's trial id), state, values, metric, job."""
    interrupted = search.interrupted_numbers(ostudy)
    study = search.stored_study(ostudy)
    rows = []
    for t in ostudy.get_trials(deepcopy=False):
        state = STATES.get(t.state.name, t.state.name)
        if t.state.name == "FAIL" and t.number in interrupted:
            state = "Interrupted"
        metric = t.value if t.value is not None else t.user_attrs.get("last_value")
        if metric is None and t.intermediate_values:
            metric = t.intermediate_values[max(t.intermediate_values)]
        rows.append({
            "trial": t.number + 1,
            "state": state,
            "values": t.user_attrs.get("values") or _values(t, study),
            "metric": metric,
            "objective": t.value,
            "job_id": t.user_attrs.get("job_id"),
            "seconds": t.user_attrs.get("seconds"),
            "steps": len(t.intermediate_values),
            "rerun_of": t.user_attrs.get("rerun_of"),
            "message": t.user_attrs.get("message"),
        })
    return rows


def _values(t, study) -> dict:
    """A trial's trainer values when it recorded none: a queued trial's fixed parameters."""
    params = dict(t.params) or dict(t.system_attrs.get("fixed_params") or {})
    return search.trainer_values(params, study) if study is not None else params


def best_row(ostudy, rows: list[dict]) -> dict | None:
    """The best succeeded trial by the study's goal, or None."""
    try:
        best = ostudy.best_trial
    except ValueError:
        return None
    return next(r for r in rows if r["trial"] == best.number + 1)


def plot_study(ostudy, study_params: list[dict], path: Path, *, metric: str) -> dict[str, list]:
    """Scatter the metric against each parameter (the best trial marked); returns the points drawn."""
    try:
        import matplotlib
    except ModuleNotFoundError as exc:
        raise UserError("plotting needs matplotlib; pip install 'multiworker[plot]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in trial_rows(ostudy) if r["metric"] is not None and math.isfinite(r["metric"])]
    if not rows:
        raise UserError(f"study {ostudy.study_name!r} has no trial with a metric yet; nothing to plot")
    best = best_row(ostudy, trial_rows(ostudy))
    names = [p["name"] for p in study_params] or sorted({k for r in rows for k in r["values"]})
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    drawn: dict[str, list] = {}
    for ax, name in zip(axes[0], names):
        spec = next((p for p in study_params if p["name"] == name), {})
        points = [(r["values"].get(name), r["metric"], r) for r in rows if name in r["values"]]
        drawn[name] = [[x, y] for x, y, _ in points]
        categorical = spec.get("type") == "CATEGORICAL" or any(isinstance(x, str) for x, _, _ in points)
        if categorical:
            labels = list(dict.fromkeys(str(x) for x, _, _ in points))
            xs = [labels.index(str(x)) for x, _, _ in points]
            ax.set_xticks(range(len(labels)), labels)
        else:
            xs = [float(x) for x, _, _ in points]
            if spec.get("scale") in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"):
                ax.set_xscale("log")
        ys = [y for _, y, _ in points]
        colors = ["tab:red" if best is not None and r["trial"] == best["trial"] else "tab:blue" for _, _, r in points]
        ax.scatter(xs, ys, c=colors)
        for x, (_, y, r) in zip(xs, points):
            ax.annotate(str(r["trial"]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
        ax.set_xlabel(name)
        ax.set_ylabel(metric)
        ax.grid(True, alpha=0.3)
    title = f"study {ostudy.study_name}: {metric} per trial"
    if best is not None:
        title += f" (best: trial {best['trial']}, red)"
    fig.suptitle(title)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return drawn
