"""The live console of a foreground run: ``[worker-1]`` prefixed lines, a progress line per epoch,
events, and the final summary."""

from __future__ import annotations

import os
import re
import sys

from rich.console import Console
from rich.markup import escape

from multiworker.job.observer import Observer
from multiworker.monitor.format import fmt_metrics, format_progress

__all__ = ["ConsoleObserver", "format_progress", "is_startup_noise", "run_console"]

_COLORS = {"chief": "magenta", "worker": "cyan", "ps": "yellow", "evaluator": "green"}
# TensorFlow's C++ INFO/WARNING log lines and start-up banners: kept in the log files, hidden on
# the console unless --verbose (errors, E..., always show).
_NOISE = re.compile(
    r"^([IW]\d{4} [\d:.]+ +\d+ \S+:\d+\]|WARNING: All log messages before absl|Example stragglers:|/job:\w+/replica:|"
    r"To enable the following instructions: |E\d{4} .*(cuInit|cuda_platform|cuda_dnn|cuda_blas|cuda_fft))"
)
# INFO and DEBUG records of the libraries a trainer runs on (multiworker's own trainer helpers,
# TensorFlow, absl, Keras), in logging's usual formats: "2026-11-26 02:10:11,645 INFO multiworker.x: ...",
# "INFO:tensorflow:...". A user's own loggers are theirs to see.
_LIBRARY_INFO = re.compile(
    r"^(?:\d{4}-\d\d-\d\d[ T][\d:,.]+\s+)?(?:\[?)(?:INFO|DEBUG)\]?[: ]\s*"
    r"(?:multiworker|absl|tensorflow|tf_keras|keras|h5py|grpc|urllib3|ray)(?:[.\w]*)(?::|\s)"
)
# The lines a multi-line record continues with: protobuf text (TensorFlow's session config dump),
# indented lines, blank lines.
_CONTINUATION = re.compile(r"^(\s.*|\s*|[\w.\[\]/]+ \{|\}|[\w.\[\]]+: .*)$")


def is_startup_noise(line: str) -> bool:
    """A line of TensorFlow's native start-up chatter (oneDNN, CUDA probing, absl's pre-init banner)."""
    return bool(_NOISE.match(line))


class _Noise:
    """Which replica lines are noise: the patterns above, and the continuation lines of a hidden
    multi-line record (per replica, as each replica's lines arrive in order)."""

    def __init__(self) -> None:
        self._in_record: set[str] = set()

    def __call__(self, replica: str, line: str) -> bool:
        if _NOISE.match(line) or _LIBRARY_INFO.match(line):
            self._in_record.add(replica)
            return True
        if replica in self._in_record and _CONTINUATION.match(line):
            return True
        self._in_record.discard(replica)
        return False


class _RunConsole(Console):
    """A console whose reader may go away (``run ... | head``, a closed pipe): it falls silent, and the
    job goes on to its end, recorded and logged as ever, instead of the launcher dying with it."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # later writes of anyone in this process go nowhere
        os.close(devnull)


def run_console() -> Console:
    """The console of a foreground run."""
    return _RunConsole(highlight=False, soft_wrap=True, emoji=False)


class ConsoleObserver(Observer):
    """Prints to the terminal; ``quiet`` hides the replicas' own output; library INFO lines and
    TensorFlow's start-up noise show only when ``verbose``."""

    def __init__(self, *, quiet: bool = False, verbose: bool = False, console: Console | None = None,
                 defer_end: bool = False):
        self.quiet = quiet
        self.verbose = verbose
        self.console = console or run_console()
        self._noise = _Noise()
        self.finished: tuple[str, str] | None = None  # (state, message) once the job ended
        self.defer_end = defer_end  # the caller prints the end with print_end() (or leaves it to an error line)

    def _prefix(self, replica: str) -> str:
        color = _COLORS.get(replica.rsplit("-", 1)[0], "white")
        return f"[{color}]\\[{replica}][/{color}]"

    def on_line(self, replica: str, line: str) -> None:
        if not self.quiet and (self.verbose or not self._noise(replica, line)):
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
        if reason in ("Succeeded", "Failed", "Cancelled", "DeadlineExceeded", "SubmitFailed"):
            return  # on_finish prints the end (a failed submission's message too)
        style = "yellow" if warning else "dim"
        who = f"{replica}: " if replica else ""
        first, *rest = message.splitlines() or [""]
        self.console.print(f"[{style}]» {reason} {escape(who + first)}[/{style}]")
        for line in rest:
            self.console.print(f"[{style}]  {escape(line)}[/{style}]")

    def on_finish(self, state: str, message: str) -> None:
        self.finished = (state, message)
        if not self.defer_end:
            self.print_end()

    def print_end(self) -> None:
        """The job's end: its state and message."""
        if self.finished is None:
            return
        state, message = self.finished
        style = {"Succeeded": "bold green", "Cancelled": "bold yellow"}.get(state, "bold red")
        first, *rest = message.splitlines() or [""]
        self.console.print(f"[{style}]{state}[/{style}]: {escape(first)}")
        for line in rest:
            self.console.print(escape(line))
        sys.stdout.flush()
