"""The live console of a foreground run: ``[worker-1]`` prefixed lines, a progress line per epoch,
events, and the final summary."""

from __future__ import annotations

import re
import sys

from rich.console import Console
from rich.markup import escape

from multiworker.job.observer import Observer
from multiworker.monitor.format import fmt_metrics, format_progress

__all__ = ["ConsoleObserver", "format_progress"]

_COLORS = {"chief": "magenta", "worker": "cyan", "ps": "yellow", "evaluator": "green"}
# TensorFlow's C++ INFO/WARNING log lines and start-up banners: kept in the log files, hidden on
# the console unless --verbose (errors, E..., always show).
_NOISE = re.compile(
    r"^([IW]\d{4} [\d:.]+ +\d+ \S+:\d+\]|WARNING: All log messages before absl|Example stragglers:|/job:\w+/replica:|"
    r"To enable the following instructions: |E\d{4} .*(cuInit|cuda_platform|cuda_dnn|cuda_blas|cuda_fft))"
)


class ConsoleObserver(Observer):
    """Prints to the terminal; ``quiet`` hides the replicas' own output."""

    def __init__(self, *, quiet: bool = False, verbose: bool = False, console: Console | None = None):
        self.quiet = quiet
        self.verbose = verbose
        self.console = console or Console(stderr=False, highlight=False, soft_wrap=True, emoji=False)

    def _prefix(self, replica: str) -> str:
        color = _COLORS.get(replica.rsplit("-", 1)[0], "white")
        return f"[{color}]\\[{replica}][/{color}]"

    def on_line(self, replica: str, line: str) -> None:
        if not self.quiet and (self.verbose or not _NOISE.match(line)):
            self.console.print(f"{self._prefix(replica)} {escape(line)}")

    def on_metric(self, replica: str, metric: dict, *, primary: bool) -> None:
        kind = metric.get("kind")
        if kind == "epoch" and primary:
            self.console.print(f"[bold]{self._prefix(replica)} {escape(format_progress(metric))}[/bold]")
        elif kind in ("eval", "final"):
            self.console.print(f"[bold]{self._prefix(replica)} {kind}: {escape(fmt_metrics(metric))}[/bold]")

    def on_event(self, reason: str, message: str, *, replica: str | None, warning: bool) -> None:
        if reason in ("Started", "ExitedWithCode") and not warning and self.quiet:
            return
        if reason in ("Succeeded", "Failed", "Cancelled", "DeadlineExceeded"):
            return  # on_finish prints the end
        style = "yellow" if warning else "dim"
        who = f"{replica}: " if replica else ""
        first, *rest = message.splitlines() or [""]
        self.console.print(f"[{style}]» {reason} {escape(who + first)}[/{style}]")
        for line in rest:
            self.console.print(f"[{style}]  {escape(line)}[/{style}]")

    def on_finish(self, state: str, message: str) -> None:
        style = {"Succeeded": "bold green", "Cancelled": "bold yellow"}.get(state, "bold red")
        first, *rest = message.splitlines() or [""]
        self.console.print(f"[{style}]{state}[/{style}]: {escape(first)}")
        for line in rest:
            self.console.print(escape(line))
        sys.stdout.flush()
