"""Failure summaries: the root cause (first replica to fail) and the others grouped by error."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from multiworker.policy import exit_description
from multiworker.terminal import printable

__all__ = ["ReplicaFailure", "error_tail", "last_error_line", "summarize"]

_TAIL_LINES = 12


@dataclasses.dataclass(frozen=True)
class ReplicaFailure:
    replica: str
    pid: int | None
    returncode: int
    log_path: Path


def _read_tail(path: Path, max_bytes: int = 64_000) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            text = f.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line for line in printable(text.replace("\r", "\n")).splitlines() if line.strip()]


def error_tail(path: Path, lines: int = _TAIL_LINES) -> list[str]:
    """The end of the last Python traceback in a log, else its last lines."""
    tail = _read_tail(path)
    starts = [i for i, line in enumerate(tail) if line.startswith("Traceback (most recent call last)")]
    if starts:
        block = tail[starts[-1]:]
        end = next((i + 1 for i, line in enumerate(block) if i > 0 and not line.startswith((" ", "\t", "Traceback"))
                    and ":" in line and not line.startswith("During handling")), len(block))
        block = block[:end]
        return block if len(block) <= lines else [block[0], "  ...", *block[-(lines - 2):]]
    return tail[-lines:]


def last_error_line(path: Path) -> str:
    """One line that names the error (an exception line if there is one)."""
    tail = error_tail(path)
    for line in reversed(tail):
        if not line.startswith((" ", "\t")) and ("Error" in line or "Exception" in line or ":" in line):
            return line.strip()[:300]
    return tail[-1].strip()[:300] if tail else "(no output)"


def summarize(root: ReplicaFailure, others: list[ReplicaFailure]) -> str:
    """A multi-line summary: root cause with its traceback tail, then other failures grouped."""
    lines = [
        f"root cause: {root.replica} (pid {root.pid}) failed with {exit_description(root.returncode)}",
        f"  log: {root.log_path}",
    ]
    lines += [f"  | {line}" for line in error_tail(root.log_path)]
    groups: dict[str, list[str]] = {}
    for f in others:
        key = f"{exit_description(f.returncode)}: {last_error_line(f.log_path)}"
        groups.setdefault(key, []).append(f.replica)
    for key, names in groups.items():
        lines.append(f"also failed [{', '.join(names)}]: {key}")
    return "\n".join(lines)
