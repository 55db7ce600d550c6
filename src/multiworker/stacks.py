"""Python stacks of running replicas, taken from outside with py-spy (no cooperation from the
trainer, so any trainer is covered), and which replica holds the others up (the laggard).

``py-spy dump`` pauses the process (ptrace) while it reads the stacks; a process that is already
stopped (SIGSTOP) cannot be paused again, so it is read without pausing (``--nonblocking``), which
is exact for a process that does not run. Reading another process's memory needs ptrace rights:
root, the same user with ``kernel.yama.ptrace_scope`` 0 or 1 (py-spy is the parent's sibling here,
so scope 1 needs CAP_SYS_PTRACE), or a container started with ``--cap-add SYS_PTRACE``.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["Dump", "dump", "py_spy", "process_state", "pick_laggard", "main_thread", "render"]

_THREAD = re.compile(r'^Thread (\w+) \(([^)]*)\)(?:: "(.*)")?')
_FRAME = re.compile(r"^\s+(\S.*?) \((.*)\)\s*$")
# Frames of a replica waiting for its peers: inside TensorFlow's runtime (an op, a collective).
_WAITING_IN = ("tensorflow/", "tf_keras/", "keras/src/", "jax/", "torch/")
_STATES = {"R": "running", "S": "sleeping", "D": "in uninterruptible I/O", "T": "stopped", "t": "stopped (traced)",
           "Z": "a zombie", "X": "dead", "I": "idle"}


@dataclasses.dataclass
class Dump:
    """One replica's stacks: py-spy's text, or why there is none."""

    replica: str
    pid: int | None
    state: str  # process state in words: running, sleeping, stopped...
    text: str = ""
    error: str | None = None
    step: int | None = None  # the replica's last reported global step, if any

    def header(self) -> str:
        step = f", last step {self.step}" if self.step is not None else ""
        return f"== {self.replica} (pid {self.pid}, {self.state}{step}) =="


def py_spy() -> str | None:
    """The py-spy executable next to this interpreter, or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def process_state(pid: int) -> str:
    """The process's state in words (from /proc), or 'gone'."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "gone"
    code = stat.rpartition(")")[2].split()[0]
    return _STATES.get(code, code)


def dump(replica: str, pid: int, *, timeout: float = 30.0) -> Dump:
    """Every thread's Python stack of ``pid`` (and of its Python child processes)."""
    state = process_state(pid)
    exe = py_spy()
    if exe is None:
        return Dump(replica, pid, state, error="py-spy is not installed: pip install py-spy")
    if state == "gone":
        return Dump(replica, pid, state, error="the process has exited")
    tries = [["--nonblocking"]] if state.startswith("stopped") else [[], ["--nonblocking"]]
    error = ""
    for extra in tries:
        try:
            out = subprocess.run([exe, "dump", "--pid", str(pid), "--subprocesses", *extra], capture_output=True,
                                 text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            error = f"py-spy took more than {timeout:g}s"
            continue
        except OSError as exc:
            error = f"py-spy did not run: {exc}"
            break
        if out.returncode == 0 and "Thread " in out.stdout:
            return Dump(replica, pid, state, text=out.stdout.rstrip())
        error = _first_error(out.stderr or out.stdout)
    if "ptrace" in error.lower() or "permission" in error.lower() or "operation not permitted" in error.lower():
        error += " (reading another process's stacks needs ptrace rights: root, or CAP_SYS_PTRACE)"
    return Dump(replica, pid, state, error=error or "py-spy read no stack")


def _first_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip()[0].isdigit()]
    picked = [ln for ln in lines if ln.startswith(("Error", "Caused", "0:", "1:"))] or lines
    return " ".join(picked[:3])[:300]


def main_thread(text: str) -> list[tuple[str, str]]:
    """The frames (function, file:line) of the main thread in a py-spy dump, innermost first."""
    threads: list[tuple[str, list[tuple[str, str]]]] = []
    for line in text.splitlines():
        if m := _THREAD.match(line):
            threads.append((m.group(3) or "", []))
        elif threads and (f := _FRAME.match(line)):
            threads[-1][1].append((f.group(1), f.group(2)))
    for name, frames in threads:
        if name == "MainThread":
            return frames
    return threads[0][1] if threads else []


def _waits_in_runtime(d: Dump) -> bool:
    frames = main_thread(d.text)
    return bool(frames) and any(marker in frames[0][1] for marker in _WAITING_IN)


def pick_laggard(dumps: Mapping[str, Dump]) -> tuple[str, str] | None:
    """The replica that is not where the others wait, and why; None when none stands out.

    In order: a stopped process; the one replica whose main thread is outside the framework's
    runtime while the others wait inside it (in an op or a collective); the one replica that
    reported the fewest steps.
    """
    stopped = [d.replica for d in dumps.values() if d.state.startswith("stopped")]
    if len(stopped) == 1:
        return stopped[0], "its process is stopped (it does not run at all); the others wait for it"
    readable = [d for d in dumps.values() if d.text]
    outside = [d for d in readable if not _waits_in_runtime(d)]
    if len(readable) >= 2 and len(outside) == 1:
        func, file = (main_thread(outside[0].text) or [("?", "?")])[0]
        return outside[0].replica, f"its main thread is in {func} ({file}) while the others wait inside the framework"
    steps = {d.replica: d.step for d in dumps.values() if d.step is not None}
    if len(steps) >= 2:
        low = min(steps.values())
        behind = [r for r, s in steps.items() if s == low]
        if len(behind) == 1 and low < max(steps.values()):
            return behind[0], f"it reported step {low}, the others more"
    return None


def render(dumps: Mapping[str, Dump]) -> str:
    """Every replica's stacks, one section each."""
    parts = []
    for d in dumps.values():
        parts.append(d.header())
        parts.append(d.text if d.text else f"(no stacks: {d.error})")
        parts.append("")
    return "\n".join(parts)
