"""``multiworker watch``: a live view of one job drawn with rich, redrawn in place (no flicker) from
the store until the job ends: progress per replica, throughput, restarts, CPU/memory, recent events."""

from __future__ import annotations

import logging
import time

from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from multiworker.job import JobState, Store
from multiworker.monitor.format import (
    STATE_STYLES,
    fmt_bytes,
    fmt_duration,
    fmt_metrics,
    format_progress,
)
from multiworker.status import HEARTBEAT_STALE, job_status

__all__ = ["snapshot", "render", "replica_progress", "watch"]

log = logging.getLogger(__name__)

_BAR_WIDTH = 16
_SYNC_ROLES = ("chief", "worker")  # train in lockstep under synchronous strategies


def snapshot(store: Store, job_id: str, *, events: int = 8) -> dict:
    """The status document plus the most recent events: everything one frame shows."""
    doc = job_status(store, job_id)
    doc["recent_events"] = store.recent_events(job_id, events)
    doc["now"] = time.time()
    return doc


def _fraction(epoch: int | None, epochs: int | None, step: int | None = None, steps: int | None = None,
              *, done: bool = False) -> float | None:
    if not epochs or epoch is None:
        return None
    within = (step / steps) if (step is not None and steps) else (1.0 if done else 0.0)
    return max(0.0, min(1.0, (epoch - 1 + within) / epochs))


def replica_progress(rep: dict, doc: dict) -> dict:
    """Where a replica is: ``fraction`` of all epochs, ``epoch`` ('2/5') and ``step`` ('40/100') texts, the
    step rate, and ``borrowed`` when it reports nothing itself and shows the chief's (lockstep) progress."""
    own_p, own_m = rep.get("progress"), rep.get("last_metrics")
    borrowed = False
    if own_p is None and own_m is None and rep["role"] in _SYNC_ROLES and rep["state"] in ("Running", "Succeeded"):
        primary = next((r for r in doc["replicas"] if r["progress"] or r["last_metrics"]), None)
        if primary is not None and primary["role"] in _SYNC_ROLES:
            own_p, own_m, borrowed = primary["progress"], primary["last_metrics"], True
    out = {"fraction": None, "epoch": "", "step": "", "steps_per_sec": None, "borrowed": borrowed}
    if own_p and (not own_m or (own_p["epoch"] or 0) > (own_m.get("epoch") or 0)):
        out["fraction"] = _fraction(own_p["epoch"], own_p["epochs"], own_p["step"], own_p["steps"])
        out["epoch"] = _of(own_p["epoch"], own_p["epochs"])
        out["step"] = _of(own_p["step"], own_p["steps"])
        out["steps_per_sec"] = own_p["steps_per_sec"]
    elif own_m:
        out["fraction"] = _fraction(own_m.get("epoch"), own_m.get("epochs"), done=True)
        out["epoch"] = _of(own_m.get("epoch"), own_m.get("epochs"))
        out["step"] = "done"
    if rep["state"] == "Succeeded" and out["fraction"] is not None and not borrowed:
        out["fraction"] = 1.0
    return out


def _of(n: int | None, total: int | None) -> str:
    if n is None:
        return ""
    return f"{n}/{total}" if total else str(n)


def _header(doc: dict) -> Text:
    state = doc["state"]
    text = Text.assemble((f"{doc['name']} ", "bold"), (doc["id"], "dim"), "  ",
                         (state, STATE_STYLES.get(state, "")), f"  attempt {doc['attempt']}",
                         f"  restarts {doc['restarts']}", f"  elapsed {fmt_duration(doc['duration_seconds'])}")
    if doc.get("images_per_sec"):
        text.append(f"  {doc['images_per_sec']:,.0f} images/s", "bold")
    age = doc.get("heartbeat_age_seconds")
    if age is not None and age > HEARTBEAT_STALE:
        text.append(f"  no heartbeat for {age:.0f}s", "bold red")
    return text


def _replica_table(doc: dict) -> Table:
    table = Table(box=None, pad_edge=False, expand=False)
    for col in ("REPLICA", "STATE", "PROGRESS", "EPOCH", "STEP", "STEPS/S", "CPU%", "MEMORY"):
        table.add_column(col, justify="right" if col in ("STEPS/S", "CPU%", "MEMORY") else "left", no_wrap=True)
    for rep in doc["replicas"]:
        prog = replica_progress(rep, doc)
        if prog["fraction"] is not None:
            bar: RenderableType = ProgressBar(
                total=1000, completed=int(prog["fraction"] * 1000), width=_BAR_WIDTH, style="grey23",
                complete_style="grey50" if prog["borrowed"] else "cyan", finished_style="green")
        else:
            bar = Text("-", style="dim")
        style = "dim" if prog["borrowed"] else ""
        rate = "" if prog["steps_per_sec"] is None or prog["borrowed"] else f"{prog['steps_per_sec']:.1f}"
        table.add_row(rep["name"], Text(rep["state"], STATE_STYLES.get(rep["state"], "")), bar,
                      Text(("≈" if prog["borrowed"] else "") + prog["epoch"], style), Text(prog["step"], style), rate,
                      "-" if rep["cpu_percent"] is None else f"{rep['cpu_percent']:.0f}", fmt_bytes(rep["rss_bytes"]))
    return table


def _metrics(doc: dict) -> Text | None:
    parts = []
    if doc.get("last_metrics"):
        parts.append(format_progress(doc["last_metrics"]))
    for kind in ("eval_metrics", "final_metrics"):
        if doc.get(kind):
            parts.append(f"{kind.split('_')[0]}: {fmt_metrics(doc[kind])}")
    return Text("\n".join(parts)) if parts else None


def _events(doc: dict) -> Table:
    table = Table(box=None, pad_edge=False, show_header=True, title_justify="left")
    for col in ("AGE", "REASON", "REPLICA", "MESSAGE"):
        table.add_column(col, no_wrap=col != "MESSAGE", overflow="ellipsis")
    for ev in doc["recent_events"]:
        style = "yellow" if ev["type"] == "Warning" else ""
        first = (ev["message"] or "").splitlines()[0] if ev["message"] else ""
        table.add_row(fmt_duration(doc["now"] - ev["ts"]), Text(ev["reason"], style), ev["replica"] or "",
                      Text(first, style, overflow="ellipsis", no_wrap=True))
    return table


def render(doc: dict) -> RenderableType:
    """One frame of the live view."""
    parts: list[RenderableType] = [_header(doc), Text(""), _replica_table(doc)]
    metrics = _metrics(doc)
    if metrics is not None:
        parts += [Text(""), metrics]
    parts += [Text(""), _events(doc)]
    if JobState(doc["state"]).is_terminal:
        if doc.get("message"):
            parts += [Text(""), Text.from_markup(f"[{STATE_STYLES.get(doc['state'], '')}]{doc['state']}[/]: "
                                                 f"{escape(doc['message'].splitlines()[0])}")]
    else:
        parts += [Text(""), Text("Ctrl-C stops watching; the job keeps running.", style="dim")]
    return Group(*parts)


def watch(store: Store, job_id: str, *, console: Console | None = None, interval: float = 1.0) -> dict:
    """Redraw the view every ``interval`` seconds until the job ends; return the last snapshot."""
    from rich.live import Live

    console = console or Console(highlight=False)
    doc = snapshot(store, job_id)
    with Live(render(doc), console=console, auto_refresh=False, transient=False) as live:
        while not JobState(doc["state"]).is_terminal:
            time.sleep(interval)
            doc = snapshot(store, job_id)
            live.update(render(doc), refresh=True)
    return doc
