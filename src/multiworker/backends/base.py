"""The seam every backend plugs into: the ``Backend`` template with its options model and registry,
and the ``ReplicaGroup`` a supervised backend (local, ray) places and runs its replicas through.

Two kinds of backend:

* **supervised here** (``local``, ``ray``): multiworker's group controller runs the restart loop
  (attempts, ``policy.decide``, deadline, fault injection) over a :class:`ReplicaGroup` that places
  replicas, learns their addresses and runs them;
* **platform-managed** (``kubernetes``, ``vertex``): the platform restarts; the backend submits the
  object, then mirrors its state, per-replica states, events and logs.

Either way ``Backend.run`` (a template) loads the job's record, opens its :class:`~multiworker.job.Journal`
with the stop signals installed, and calls the backend's ``drive``; every write goes through the journal,
so metric lines, events and the final state are recorded the same way for every backend. Readers
(``status``, ``watch``, ``logs``...) read only the store and the log layout.

Backends are found by name: the built-in ones below, and any installed package's entry point in the
``multiworker.backends`` group (``name = "package.module:Class"``).
"""

from __future__ import annotations

import abc
import dataclasses
import importlib
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import pydantic

from multiworker.errors import MultiworkerError, UserError
from multiworker.job import JobRecord, JobState, Journal, Store
from multiworker.stacks import Dump

if TYPE_CHECKING:  # pragma: no cover
    from multiworker.cluster import ReplicaId
    from multiworker.spec.load import LoadedSpec

__all__ = [
    "Backend",
    "BackendOptions",
    "ReplicaGroup",
    "Placement",
    "BACKENDS",
    "ENTRY_POINT_GROUP",
    "get_backend",
    "backend_class",
    "backend_names",
]


class BackendOptions(pydantic.BaseModel):
    """A backend's own options. Each field is a ``run`` / ``tune`` flag (``ray_address`` is
    ``--ray-address``) and a ``--backend-opt KEY=VALUE`` key; its description is the flag's help."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)


class Backend(abc.ABC):
    """Runs a recorded job somewhere. One instance per process; stateless between calls.

    Per-job state a backend needs later (a Kubernetes namespace and object name, a Vertex resource
    name, a Ray address) is its *handle*: ``journal.set_handle(dict)``, read back as ``record.handle``.
    """

    name: ClassVar[str]
    #: the pip extra that brings its dependencies (``multiworker[ray]``), for the install hint
    extra: ClassVar[str | None] = None
    #: True when multiworker's group controller restarts replicas (local, ray); False when the
    #: platform does (kubernetes, vertex)
    supervised_here: ClassVar[bool] = True
    #: the backend's options; ``run`` and ``tune`` build their flags from it
    Options: ClassVar[type[BackendOptions]] = BackendOptions

    def options(self, raw: dict[str, Any]) -> BackendOptions:
        """The options as given (``run`` flags, ``--backend-opt``, a recorded job's), validated; a
        one-line error naming the flag and the fix."""
        try:
            return self.Options.model_validate(raw)
        except pydantic.ValidationError as exc:
            err = exc.errors()[0]
            key = str(err["loc"][0]) if err["loc"] else "?"
            flag = "--" + key.replace("_", "-")
            if err["type"] == "extra_forbidden":
                known = ", ".join("--" + f.replace("_", "-") for f in self.Options.model_fields) or "none"
                raise UserError(f"{flag}: not an option of the {self.name} backend (its options: {known})") from None
            raise UserError(f"{flag}: {err['msg']} (got {err.get('input')!r})") from None

    def check(self, loaded: LoadedSpec, options: BackendOptions) -> list[str]:
        """Refuse (``UserError`` naming the field and the fix) a spec this backend cannot run,
        before anything is created anywhere; return notes to print."""
        return []

    def run(self, store: Store, job_id: str, observer: Any = None) -> JobState:
        """Drive the job to its end from this process; record everything through its journal; return
        the final state. Ctrl-C / SIGTERM / SIGHUP in this process stop the job (exit 130 upstream)."""
        record = store.get_job(job_id)
        if record.state is not JobState.PENDING:  # e.g. cancelled before its driver started
            return record.state
        journal = Journal(store, record, observer)
        with journal.stop_signals():
            journal.claim()
            try:
                return self.drive(record, self.options(record.backend_options), journal)
            except BaseException as exc:  # never leave a live record behind, unless a platform runs the job
                message = str(exc) if isinstance(exc, MultiworkerError) else f"supervisor error: {exc!r}"
                if journal.platform_owned:
                    journal.event("DriverError", f"stopped following the job: {message}", warning=True)
                else:
                    journal.finish(JobState.FAILED, message, reason="Failed")
                raise

    @abc.abstractmethod
    def drive(self, record: JobRecord, options: Any, journal: Journal) -> JobState:
        """The backend's own step: run the recorded job, recording through ``journal``; return
        ``journal.finish(...)``'s state. ``journal.stop_signal`` turns non-None when asked to stop."""

    @abc.abstractmethod
    def cancel(self, store: Store, job: JobRecord, *, timeout: float | None = None) -> JobRecord:
        """Stop a running job (from another process) and return its record, Cancelled.

        ``timeout``: seconds to wait for the job's driver to stop it (None: the backend's default,
        e.g. the job's grace period plus a margin)."""

    def reconcile(self, store: Store, job: JobRecord) -> JobRecord:
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

    def program(self, replica: ReplicaId, trainer_args: list[str]) -> tuple[list[str], Path] | None:
        """The command line and working directory of ``replica`` where the group runs it, or None
        for the spec's program on this machine (a container group answers with what its image runs)."""
        return None

    @abc.abstractmethod
    def place(self, replicas: list[ReplicaId], attempt: int) -> dict[ReplicaId, Placement]:
        """Reserve a node and a free port for every replica; return where each will listen."""

    @abc.abstractmethod
    def start(self, replica: ReplicaId, cmd: list[str], cwd: Path, env: dict[str, str], log_path: Path) -> int:
        """Start one replica (own session, dies with its parent); its output ends up in
        ``log_path`` on this machine. Return its pid (on its node).

        ``env`` holds only what multiworker sets (TF_CONFIG, CLUSTER_SPEC, AIP_*, MULTIWORKER_*, the
        spec's env); the group lays it over the environment a process gets where the replica runs
        (``multiworker.procs.child_environ(env)`` on that node)."""

    @abc.abstractmethod
    def poll(self) -> dict[ReplicaId, int | None]:
        """Every started replica's raw exit code, None while it runs."""

    @abc.abstractmethod
    def signal(self, replica: ReplicaId, signum: int) -> bool:
        """Send a signal to the replica's process group; False if it was not running."""

    @abc.abstractmethod
    def stop(self, replicas: list[ReplicaId], grace: float) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; return once all have exited."""

    def read_log(self, replica: ReplicaId) -> bytes:
        """New output since the last call (remote groups copy it into ``log_path`` first)."""
        return b""

    def samples(self) -> list[tuple[str, float, int]]:
        """(replica name, CPU %, RSS bytes) for each running replica; empty if unknown."""
        return []

    def dump_stacks(self, replica: ReplicaId) -> Dump:
        """Every thread's Python stack of the running replica, read on its node (py-spy)."""
        return Dump(replica.name, None, "unknown", error=f"the {type(self).__name__} cannot read stacks")

    def close(self) -> None:  # noqa: B027 - optional: a group that holds nothing has nothing to release
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
    "containers": "multiworker.backends.containers:ContainersBackend",
}
ENTRY_POINT_GROUP = "multiworker.backends"


def _registry() -> dict[str, str]:
    """The built-in backends, then those installed packages declare as entry points."""
    found = dict(BACKENDS)
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(ep.name, ep.value)
    return found


def backend_names() -> list[str]:
    return list(_registry())


def get_backend(name: str) -> Backend:
    """The backend called ``name``; a one-line error for an unknown one or a missing extra."""
    return backend_class(name)()


def backend_class(name: str) -> type[Backend]:
    """The class of the backend called ``name`` (its ``Options``, ``supervised_here``...), imported
    on first use; a one-line error for an unknown one or a missing extra."""
    registry = _registry()
    target = registry.get(name)
    if target is None:
        raise UserError(f"--backend {name!r}: unknown backend; choose one of {', '.join(registry)}")
    module_name, _, cls_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("multiworker") and not module_name.startswith(exc.name):
            raise UserError(f"--backend {name}: needs the {exc.name!r} package; "
                            f"pip install 'multiworker[{name}]'") from exc
        raise
    return getattr(module, cls_name)
