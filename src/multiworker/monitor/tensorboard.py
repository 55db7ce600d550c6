"""``multiworker tensorboard``: TensorBoard (shipped with TensorFlow) on a job's log directory."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from multiworker import procs
from multiworker.errors import UserError
from multiworker.job import JobRecord, Store

__all__ = ["DEFAULT_PORT", "Launched", "logdir_of", "tensorboard_command", "pick_port", "launch", "serve"]

log = logging.getLogger(__name__)

DEFAULT_PORT = 6006


def logdir_of(job: JobRecord) -> Path:
    """Where the trainer writes TensorBoard events: ``<output>/logs`` (AIP_TENSORBOARD_LOG_DIR)."""
    return Path(job.output_dir) / "logs"


def tensorboard_command(logdir: Path, host: str, port: int) -> list[str]:
    return [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", host, "--port", str(port)]


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
            return True
        except OSError:
            return False


def pick_port(host: str, port: int | None) -> int:
    """The asked port (an error if taken), else 6006, else any free port."""
    if port is not None:
        if not _port_free(host, port):
            raise UserError(f"port {port} on {host} is in use; pick another with --port, or leave it out")
        return port
    if _port_free(host, DEFAULT_PORT):
        return DEFAULT_PORT
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def _raise_exit(signum, _frame) -> None:
    raise SystemExit(128 + signum)


@dataclasses.dataclass
class Launched:
    """A TensorBoard process just started for a job: where it will listen, and its own log."""

    proc: subprocess.Popen
    host: str
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        shown = "localhost" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{shown}:{self.port}/"

    def listening(self) -> bool:
        return _listening(self.host, self.port)

    def failure(self) -> str | None:
        """Why it will not serve (it exited), else None while it may still come up."""
        if self.proc.poll() is None:
            return None
        tail = self.log_path.read_text(errors="replace").strip().splitlines()[-5:] if self.log_path.exists() else []
        return f"TensorBoard did not start (see {self.log_path}): " + " | ".join(tail)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def launch(store: Store, job_id: str, *, host: str = "127.0.0.1", port: int | None = None) -> Launched:
    """Start TensorBoard on the job's log directory and return at once (it listens seconds later).

    Own process group, killed by the kernel if the calling *thread* dies (PDEATHSIG): call it from
    a thread that lives as long as TensorBoard should. Its output goes to ``<job dir>/tensorboard.log``.
    """
    if importlib.util.find_spec("tensorboard") is None:
        raise UserError("TensorBoard is not installed; it ships with TensorFlow: `pip install 'multiworker[tensorflow]'`")
    job = store.get_job(job_id)
    logdir = logdir_of(job)
    if not logdir.is_dir() and job.is_terminal:
        raise UserError(f"job {job_id} wrote no TensorBoard logs ({logdir} does not exist); "
                        "the trainer writes them with the TensorBoard callback into AIP_TENSORBOARD_LOG_DIR")
    port = pick_port(host, port)
    log_path = job.job_dir / "tensorboard.log"
    proc = procs.spawn(tensorboard_command(logdir, host, port), cwd=Path.cwd(), env=dict(os.environ),
                       log_path=log_path)
    return Launched(proc, host, port, log_path)


def serve(store: Store, job_id: str, *, host: str = "127.0.0.1", port: int | None = None,
          on_ready: Callable[[str], None] = print, startup_timeout: float = 120.0) -> int:
    """Run TensorBoard in the foreground until it exits or Ctrl-C; ``on_ready(url)`` once it listens.

    Its own output goes to ``<job dir>/tensorboard.log`` (shown when it fails to start).
    """
    tb = launch(store, job_id, host=host, port=port)
    previous = {}  # SIGTERM/SIGHUP unwind to `finally`
    for sig in (signal.SIGTERM, signal.SIGHUP):
        with contextlib.suppress(ValueError):  # not the main thread: the caller handles signals
            previous[sig] = signal.signal(sig, _raise_exit)
    try:
        deadline = time.monotonic() + startup_timeout
        while not tb.listening():
            failure = tb.failure() or (time.monotonic() > deadline and f"TensorBoard did not start in "
                                       f"{startup_timeout:.0f}s (see {tb.log_path})")
            if failure:
                raise UserError(failure)
            time.sleep(0.2)
        on_ready(tb.url)
        return tb.proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        tb.stop()
