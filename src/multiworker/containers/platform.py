"""What each platform gives a replica's container, as pure functions: its hostname (and the names
the others reach it by) and its command line from the image's ENTRYPOINT/CMD and the pool's program.

Entry-point rule, the same on Kubernetes (TFJob, JobSet), Vertex AI (``containerSpec``) and AI
Platform (``--master-image-uri`` with the user's args): ``command`` replaces the image's ENTRYPOINT
and drops its CMD; ``args`` alone replace CMD; neither runs ENTRYPOINT + CMD. A pool with a Python
``module`` runs ``python -m MODULE`` in the image. A JobSet pod wraps its command in
``python -m multiworker.k8s_entry --``, which builds TF_CONFIG from ``MW_CLUSTER``, ``MW_ROLE`` and
``JOB_COMPLETION_INDEX``.
"""

from __future__ import annotations

import dataclasses
import json
import re

from multiworker.cluster import ReplicaId, replica_ids, vertex_cluster_spec
from multiworker.errors import UserError
from multiworker.spec.model import JobSpec, Program

__all__ = ["PORT", "Host", "hosts", "container_argv", "dns_label", "platform_env", "JOBSET_ENTRY"]

PORT = 2222  # the port TFJob, JobSet and Vertex AI replicas listen on
JOBSET_ENTRY = ["python", "-m", "multiworker.k8s_entry", "--"]
_MAX_LABEL = 63


@dataclasses.dataclass(frozen=True)
class Host:
    """A replica container's hostname and the address the others reach it at."""

    hostname: str
    address: str  # the host part of TF_CONFIG's host:port (the hostname, or hostname.subdomain)
    aliases: tuple[str, ...]


def dns_label(name: str) -> str:
    """``name`` as a DNS label (lower case letters, digits, '-'), as Kubernetes names objects."""
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    out = out if out[:1].isalpha() else f"job-{out}".rstrip("-")
    return out[:_MAX_LABEL].rstrip("-")


def hosts(spec: JobSpec, fmt: str | None) -> dict[ReplicaId, Host]:
    """Each replica's host as its platform names it: Vertex AI ``workerpool<P>-<I>``; JobSet
    ``<jobset>-<role>-0-<I>`` in the subdomain ``<jobset>``; TFJob (and the rest) ``<job>-<role>-<I>``."""
    ids = replica_ids(spec)
    name = dns_label(spec.name)
    out: dict[ReplicaId, Host] = {}
    for rid in ids:
        if fmt == "vertex":
            task = vertex_cluster_spec({r: "" for r in ids}, rid)["task"]
            host = f"{task['type']}-{task['index']}"
            out[rid] = Host(host, host, (host,))
        elif fmt == "jobset":
            host = f"{name}-{rid.role}-0-{rid.index}"
            out[rid] = Host(host, f"{host}.{name}", (host, f"{host}.{name}"))
        else:
            role = spec.chief_task_type if rid.role == "chief" else rid.role
            host = f"{name}-{role}-{rid.index}"
            out[rid] = Host(host, host, (host,))
    return out


def container_argv(program: Program, image: str, config: dict | None, trainer_args: list[str], *,
                   jobset: bool = False) -> list[str]:
    """The command line the platform runs in ``image`` for ``program``: its ``command`` (or
    ``python -m module``) over the image's ENTRYPOINT, its ``args`` over the image's CMD."""
    config = config or {}
    args = list(program.args or []) + list(trainer_args)
    if program.module:
        argv = ["python", "-m", program.module, *args]
    elif program.command:
        argv = [*program.command, *args]
    else:
        argv = [*(config.get("Entrypoint") or []), *(args or config.get("Cmd") or [])]
    if not argv:
        raise UserError(f"image {image} has no ENTRYPOINT or CMD and the pool sets no command: set `command` "
                        "(or `module`) in the spec, or give the image an ENTRYPOINT")
    if jobset:
        if not (program.module or program.command):
            raise UserError(f"image {image}: a JobSet pod wraps its command in multiworker.k8s_entry; set "
                            "`module` or `command` in the spec")
        argv = JOBSET_ENTRY + argv
    return argv


def platform_env(spec: JobSpec, fmt: str | None, rid: ReplicaId, host_of: dict[ReplicaId, Host]) -> dict[str, str]:
    """What the platform adds for a pod of a JobSet (``MW_CLUSTER``, ``MW_ROLE``, ``JOB_COMPLETION_INDEX``)."""
    if fmt != "jobset":
        return {}
    cluster: dict[str, list[str]] = {}
    for r in sorted(host_of, key=lambda r: (list(spec.replica_counts()).index(r.role), r.index)):
        cluster.setdefault(r.role, []).append(f"{host_of[r].address}:{PORT}")
    env = {"MW_CLUSTER": json.dumps(cluster, separators=(",", ":")), "MW_ROLE": rid.role,
           "JOB_COMPLETION_INDEX": str(rid.index)}
    if rid.role == "chief" and spec.chief_task_type == "master":
        env["MW_CHIEF_TASK_TYPE"] = "master"
    return env
