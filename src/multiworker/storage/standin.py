"""The launcher's side of the Cloud Storage stand-in: start it for a job's ``--map-path gs://`` mappings,
the environment that points each client at it, and stop it with the job.

Each client is pointed at it the way it supports:

- google-cloud-storage and gcsfs: ``STORAGE_EMULATOR_HOST`` (their emulator endpoint).
- TensorFlow's own GCS filesystem (``tf.io.gfile``, summaries, checkpoints, SavedModel, ``tf.data``):
  its URLs are fixed and it has no endpoint variable, but its libcurl honours ``HTTPS_PROXY`` and
  ``CURL_CA_BUNDLE``; ``NO_GCE_CHECK=true`` makes it send an empty token instead of asking a
  metadata server.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import mmap
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from multiworker import procs

__all__ = ["StandIn", "StandInFailed", "missing_requirements", "tensorflow_gcs_note"]

log = logging.getLogger(__name__)

READY_TIMEOUT = 60.0
_LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


class StandInFailed(RuntimeError):
    """The stand-in did not start (its log says why)."""


def missing_requirements() -> list[str]:
    """The packages the stand-in needs that this interpreter lacks (the ``storage`` extra)."""
    return [name for name in ("starlette", "uvicorn", "cryptography") if importlib.util.find_spec(name) is None]


def tensorflow_gcs_note() -> str | None:
    """One line when this interpreter's TensorFlow has no ``gs://`` filesystem, else None.

    Linux wheels of TensorFlow build it in (``tsl/platform/cloud``); other builds get it from the
    ``tensorflow-io-gcs-filesystem`` package. Checked without importing TensorFlow.
    """
    spec = importlib.util.find_spec("tensorflow")
    if spec is None or not spec.submodule_search_locations:
        return None  # not a TensorFlow trainer (or another interpreter): nothing to say
    if importlib.util.find_spec("tensorflow_io_gcs_filesystem") is not None:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    for lib in sorted(root.glob("libtensorflow_framework.so*")) + sorted(root.glob("libtensorflow_framework*.dylib")):
        try:
            with open(lib, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
                if data.find(b"upload/storage/v1/") >= 0:
                    return None
        except (OSError, ValueError):
            continue
    return ("TensorFlow's gs:// filesystem is not installed here (tf.io.gfile, checkpoints and summaries on "
            "gs:// will fail); pip install tensorflow-io-gcs-filesystem")


class StandIn:
    """One job's stand-in process: ``start``, then ``env`` for each replica, then ``stop``."""

    def __init__(self, mounts: Iterable[str], directory: Path, *, job_id: str,
                 enter: Callable[[], None] | None = None):
        self.mounts = list(mounts)
        self.directory = directory
        self.job_id = job_id
        self.enter = enter
        self.proc: procs.Child | None = None
        self.ready: dict = {}

    @property
    def log_path(self) -> Path:
        return self.directory / "storage.log"

    def start(self, timeout: float = READY_TIMEOUT) -> None:
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        ready = self.directory / "ready.json"
        ready.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "multiworker.storage.server", "--dir", str(self.directory)]
        for mount in self.mounts:
            cmd += ["--mount", mount]
        here = str(Path(__file__).resolve().parents[2])  # this multiworker, whatever the cwd and PYTHONPATH
        path = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
        env = procs.child_environ({"MULTIWORKER_JOB_ID": self.job_id, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path})
        self.proc = procs.spawn(cmd, cwd=self.directory, env=env, log_path=self.log_path, enter=self.enter)
        deadline = time.monotonic() + timeout
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise StandInFailed(f"the Cloud Storage stand-in did not start: {self._log_tail()}")
            time.sleep(0.05)
        self.ready = json.loads(ready.read_text())

    def env(self, also_direct: Iterable[str] = ()) -> dict[str, str]:
        """What a replica needs to reach the mapped buckets through the stand-in. ``also_direct``:
        hosts that must not go through the proxy (the replicas' own addresses; gRPC honours it too)."""
        host = self.ready["host"]
        proxy = f"http://{host}:{self.ready['proxy']}"
        existing = [h for h in (os.environ.get("NO_PROXY") or os.environ.get("no_proxy") or "").split(",") if h]
        direct = ",".join(dict.fromkeys([*existing, *_LOCAL_HOSTS, host, *also_direct]))
        return {
            "STORAGE_EMULATOR_HOST": f"http://{host}:{self.ready['http']}",
            "HTTPS_PROXY": proxy, "https_proxy": proxy,
            "NO_PROXY": direct, "no_proxy": direct,
            "CURL_CA_BUNDLE": str(self.directory / "ca-bundle.pem"),
            "NO_GCE_CHECK": "true",
        }

    def stop(self, timeout: float = 10.0) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        procs.signal_group(proc.pid, signal.SIGTERM, proc.start_ticks)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            procs.signal_group(proc.pid, signal.SIGKILL, proc.start_ticks)
            proc.wait()

    def _log_tail(self) -> str:
        try:
            lines = [line for line in self.log_path.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            lines = []
        return lines[-1] if lines else f"no output (see {self.log_path})"
