"""The seam every backend plugs into: the job-state vocabulary, the log layout, the ``Backend``
protocol with its registry, and the ``ReplicaGroup`` a supervised backend (local, ray) places and
runs its replicas through.

Two kinds of backend:

* **supervised here** (``local``, ``ray``): multiworker's own group controller runs the restart
  loop (attempts, ``policy.decide``, deadline, fault injection, metric lines) over a
  :class:`ReplicaGroup` that places replicas, learns their addresses and runs them;
* **platform-managed** (``kubernetes``, ``vertex``): the platform restarts; the backend submits the
  object, then mirrors its state, per-replica states, events and logs into the store.

Either way ``Backend.run`` drives one job from this process (the foreground launcher, or the
detached daemon ``python -m multiworker.backends.daemon JOB_ID``) and returns its final state; every
reader (``status``, ``watch``, ``logs``...) reads only the store and the log layout.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from multiworker.errors import UserError

if TYPE_CHECKING:  # pragma: no cover
    from multiworker.cluster import ReplicaId
    from multiworker.spec.load import LoadedSpec
    from multiworker.store import Store

__all__ = [
    "JobState",
    "LogLayout",
    "Backend",
    "ReplicaGroup",
    "Placement",
    "BACKENDS",
    "get_backend",
    "backend_names",
]


class JobState(str, enum.Enum):
    """A job's state, in Kubernetes' spelling. ``str`` values are what the store holds."""

    PENDING = "Pending"
    RUNNING = "Running"
    RESTARTING = "Restarting"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    LOST = "Lost"

    @property
    def is_terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def exit_code(self) -> int:
        """The launcher's exit code for a job that ended in this state."""
        return {JobState.SUCCEEDED: 0, JobState.CANCELLED: 130}.get(self, 1)

    def __str__(self) -> str:
        return self.value


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.LOST})


@dataclasses.dataclass(frozen=True)
class LogLayout:
    """Where a job's files live: ``<job_dir>/attempt_<n>/<role>-<index>.log`` and friends.

    The one definition of the layout: writers (every backend) and readers (``logs``, ``status``,
    the dashboard) both ask it.
    """

    job_dir: Path

    def attempt_dir(self, attempt: int) -> Path:
        return self.job_dir / f"attempt_{attempt}"

    def replica_log(self, attempt: int, replica: str) -> Path:
        return self.attempt_dir(attempt) / f"{replica}.log"

    @property
    def supervisor_log(self) -> Path:
        return self.job_dir / "supervisor.log"

    @property
    def spec_file(self) -> Path:
        return self.job_dir / "spec.json"


class Backend(abc.ABC):
    """Runs a recorded job somewhere. One instance per process; stateless between calls.

    Per-job state a backend needs later (a Kubernetes namespace and object name, a Vertex resource
    name, a Ray address) goes into the job's ``handle_json`` column as JSON via ``Store.update_job``.
    """

    name: ClassVar[str]
    #: the pip extra that brings its dependencies (``multiworker[ray]``), for the install hint
    extra: ClassVar[str | None] = None
    #: True when multiworker's group controller restarts replicas (local, ray); False when the
    #: platform does (kubernetes, vertex)
    supervised_here: ClassVar[bool] = True

    def check(self, loaded: "LoadedSpec", options: dict[str, Any]) -> list[str]:
        """Refuse (``UserError`` naming the field and the fix) a spec this backend cannot run,
        before anything is created anywhere; return notes to print."""
        return []

    @abc.abstractmethod
    def run(self, store: "Store", job_id: str, observer: Any = None) -> JobState:
        """Drive the job to its end from this process; record everything in the store; return the
        final state. Ctrl-C / SIGTERM in this process stop the job (exit 130 upstream)."""

    @abc.abstractmethod
    def cancel(self, store: "Store", job: dict, *, timeout: float | None = None) -> dict:
        """Stop a running job (from another process) and return its record, Cancelled.

        ``timeout``: seconds to wait for the job's driver to stop it (None: the backend's default,
        e.g. the job's grace period plus a margin)."""

    def reconcile(self, store: "Store", job: dict) -> dict:
        """Make a non-terminal record truthful (a dead driver -> Lost, with an event); return it."""
        return job


class ReplicaGroup(abc.ABC):
    """The replicas of one attempt of a supervised job, wherever they run.

    The group controller calls, per attempt: ``place`` -> ``start`` each replica -> ``poll`` /
    ``read_log`` / ``samples`` until the policy ends the attempt -> ``stop`` -> ``close``; the same
    group object is placed again for the next attempt. ``close`` is called once per attempt, also
    when starting failed part-way. Exit codes are raw ``Popen.returncode`` values (negative for a
    signal); ``policy`` normalizes.
    """

    @abc.abstractmethod
    def place(self, replicas: list["ReplicaId"], attempt: int) -> dict["ReplicaId", "Placement"]:
        """Reserve a node and a free port for every replica; return where each will listen."""

    @abc.abstractmethod
    def start(self, replica: "ReplicaId", cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> int:
        """Start one replica (own session, dies with its parent); its output ends up in
        ``log_path`` on this machine. Return its pid (on its node).

        ``env`` holds only what multiworker sets (TF_CONFIG, CLUSTER_SPEC, AIP_*, MULTIWORKER_*, the
        spec's env); the group lays it over the environment a process gets where the replica runs
        (``multiworker.procs.child_environ(env)`` on that node)."""

    @abc.abstractmethod
    def poll(self) -> dict["ReplicaId", int | None]:
        """Every started replica's raw exit code, None while it runs."""

    @abc.abstractmethod
    def signal(self, replica: "ReplicaId", signum: int) -> bool:
        """Send a signal to the replica's process group; False if it was not running."""

    @abc.abstractmethod
    def stop(self, replicas: list["ReplicaId"], grace: float) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; return once all have exited."""

    def read_log(self, replica: "ReplicaId") -> bytes:
        """New output since the last call (remote groups copy it into ``log_path`` first)."""
        return b""

    def samples(self) -> list[tuple[str, float, int]]:
        """(replica name, CPU %, RSS bytes) for each running replica; empty if unknown."""
        return []

    def close(self) -> None:
        """Release everything the group holds (actors, placement groups, reserved ports)."""


@dataclasses.dataclass(frozen=True)
class Placement:
    """Where one replica of one attempt listens: the node's address and a port reserved on it."""

    host: str
    port: int
    node: str | None = None  # backend's node id, for status

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


# name -> "module:Class"; imported only when used, so optional extras stay optional.
BACKENDS: dict[str, str] = {
    "local": "multiworker.backends.local:LocalBackend",
    "ray": "multiworker.backends.ray:RayBackend",
    "kubernetes": "multiworker.backends.kubernetes:KubernetesBackend",
    "vertex": "multiworker.backends.vertex:VertexBackend",
}


def backend_names() -> list[str]:
    return list(BACKENDS)


def get_backend(name: str) -> Backend:
    """The backend called ``name``; a one-line error for an unknown one or a missing extra."""
    target = BACKENDS.get(name)
    if target is None:
        raise UserError(f"--backend {name!r}: unknown backend; choose one of {', '.join(BACKENDS)}")
    module_name, _, cls_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("multiworker"):
            raise UserError(f"--backend {name}: needs the {exc.name!r} package; "
                            f"pip install 'multiworker[{name}]'") from exc
        raise
    return getattr(module, cls_name)()
