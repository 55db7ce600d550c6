"""The container engine on this machine: docker, podman or buildah, whichever is installed *and*
answers (a ``docker`` client without a daemon does not count), and the few calls multiworker makes
through it. Every failure is one line naming the engine and what to do."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import subprocess
from collections.abc import Sequence

from multiworker.errors import UserError

__all__ = ["Engine", "find_engine", "ENGINE_ENV", "BUILDERS", "RUNTIMES", "LABEL"]

#: Names the engine to use (docker, podman or buildah); else the first that works.
ENGINE_ENV = "MULTIWORKER_CONTAINER_ENGINE"
BUILDERS = ("docker", "podman", "buildah")
RUNTIMES = ("podman", "docker")
#: The label every container and network of a job carries: ``multiworker.job=<job id>``.
LABEL = "multiworker.job"
_PROBE_TIMEOUT = 20.0


@dataclasses.dataclass(frozen=True)
class Engine:
    """One container engine: its name and the path of its command."""

    name: str
    path: str

    def cmd(self, *args: str) -> list[str]:
        return [self.path, *args]

    def call(self, *args: str, timeout: float | None = 120.0, input: str | None = None) -> subprocess.CompletedProcess:
        """Run ``ENGINE ARGS`` and capture its output (never raises for a non-zero exit)."""
        try:
            return subprocess.run(self.cmd(*args), capture_output=True, text=True, timeout=timeout, input=input,
                                  stdin=None if input is not None else subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            return subprocess.CompletedProcess(exc.cmd, 124, "", f"timed out after {timeout:g}s")

    # -- images ------------------------------------------------------------------------------
    def image_config(self, image: str) -> dict | None:
        """The image's config (Entrypoint, Cmd, WorkingDir, Env) from the local store, or None."""
        proc = self.call("image", "inspect", image, timeout=60)
        if proc.returncode != 0:
            return None
        try:
            doc = json.loads(proc.stdout)
        except json.JSONDecodeError:
            return None
        item = doc[0] if isinstance(doc, list) and doc else {}
        return item.get("Config") or (item.get("ContainerConfig") or {})

    def has_image(self, image: str) -> bool:
        return self.call("image", "inspect", image, timeout=60).returncode == 0

    def pull(self, image: str) -> str | None:
        """Pull ``image``; None on success, else the engine's last error line."""
        proc = self.call("pull", "-q", image, timeout=1800)
        return None if proc.returncode == 0 else last_line(proc.stderr or proc.stdout)

    def remove_image(self, image: str) -> None:
        self.call("rmi", "-f", image, timeout=120)

    # -- containers and networks --------------------------------------------------------------
    def job_containers(self, job_id: str) -> list[str]:
        if self.name == "buildah":
            return []
        proc = self.call("ps", "-a", "-q", "--filter", f"label={LABEL}={job_id}", timeout=60)
        return proc.stdout.split() if proc.returncode == 0 else []

    def remove_job(self, job_id: str) -> int:
        """Remove every container of the job (killed first) and its network; return how many containers."""
        if self.name == "buildah":
            return 0
        found = self.job_containers(job_id)
        if found:
            self.call("rm", "-f", *found, timeout=120)
        self.remove_network(network_name(job_id))
        return len(found)

    def remove_network(self, name: str) -> None:
        force = ["-f"] if self.name == "podman" else []  # docker before 24 has no -f here
        self.call("network", "rm", *force, name, timeout=60)


def network_name(job_id: str) -> str:
    return f"mw-{job_id}"


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def _works(name: str, path: str) -> str | None:
    """None if the engine answers, else why not (one line)."""
    probe = ["version"] if name == "buildah" else ["info", "--format", "{{json .}}"]
    try:
        proc = subprocess.run([path, *probe], capture_output=True, text=True, timeout=_PROBE_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"{name}: {exc}"
    if proc.returncode != 0:
        return f"{name}: {last_line(proc.stderr or proc.stdout)}"
    return None


@functools.cache
def _probe(name: str) -> tuple[Engine | None, str]:
    path = shutil.which(name)
    if path is None:
        return None, f"{name}: not installed"
    why = _works(name, path)
    return (Engine(name, path), "") if why is None else (None, why)


def find_engine(candidates: Sequence[str] = RUNTIMES, *, purpose: str = "run containers",
                name: str | None = None) -> Engine:
    """The first of ``candidates`` that is installed and works (or ``name``, or $MULTIWORKER_CONTAINER_ENGINE);
    a one-line ``UserError`` saying what was tried."""
    wanted = name or os.environ.get(ENGINE_ENV) or None
    if wanted:
        if wanted not in candidates:
            raise UserError(f"--engine {wanted}: cannot {purpose}; choose one of {', '.join(candidates)}")
        candidates = (wanted,)
    reasons = []
    for candidate in candidates:
        engine, why = _probe(candidate)
        if engine is not None:
            return engine
        reasons.append(why)
    raise UserError(f"no container engine that can {purpose} works here ({'; '.join(reasons)}); install "
                    f"podman (apt-get install podman) or start the docker daemon")
