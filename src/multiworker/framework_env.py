"""The variables a JAX or PyTorch replica's launcher reads, named and valued as the platforms set them
(pure functions). TensorFlow's TF_CONFIG and CLUSTER_SPEC are built in ``multiworker.cluster``.

Processes are numbered the platforms' way: the chief (a PyTorchJob's Master) is process 0, then the
workers in order. Process 0's ``host:port`` is the rendezvous point: the JAX coordinator service, or
the PyTorch master's TCPStore. Sources, one per variable (docs/frameworks.md tables them):

- JAX: ``JAX_COORDINATOR_ADDRESS`` is read by ``jax.distributed.initialize()`` itself
  (jax/_src/distributed.py); ``JAX_NUM_PROCESSES`` and ``JAX_PROCESS_ID`` are what Kubeflow Trainer's
  ``jax-distributed`` runtime sets (kubeflow/website, docs/components/trainer/user-guides/jax.md) and
  a program passes on. ``KERAS_DISTRIBUTION_JOB_ADDRESSES``, ``_NUM_PROCESSES`` and ``_PROCESS_ID`` are
  read by ``keras.distribution.initialize()`` (keras/src/distribution/distribution_lib.py).
- PyTorch: ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``, ``RANK`` as Kubeflow's PyTorchJob sets
  them (training-operator pkg/controller.v1/pytorch/envvar.go: master rank 0, worker i rank i+1) and
  AI Platform / Vertex AI's PyTorch containers do; ``LOCAL_RANK`` 0 (one process per replica), as
  torchrun gives a process alone on its node. Where torchrun is the entry point, its ``PET_*``
  arguments as PyTorchJob sets them: ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``, ``PET_NNODES``,
  ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE``.

Standard library only: the JobSet pod entry (``multiworker.k8s_entry``) runs it in the pod.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

__all__ = ["FRAMEWORKS", "DEFAULT_FRAMEWORK", "PROCESS_ROLES", "process_names", "framework_env", "uses_torchrun",
           "vertex_members", "main"]

FRAMEWORKS: tuple[str, ...] = ("tensorflow", "jax", "pytorch")
DEFAULT_FRAMEWORK = "tensorflow"
#: Roles that are processes of a JAX or PyTorch job, in rank order (no ps, no evaluator).
PROCESS_ROLES = ("chief", "worker")
#: torchrun's launcher, by command or by module.
_TORCHRUN_COMMANDS = ("torchrun",)
_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")


def process_names(members: Mapping[str, str]) -> list[str]:
    """Replica names (``chief-0``, ``worker-1``) of ``members`` in process order: chief, then workers."""
    def order(name: str) -> tuple[int, int]:
        role, _, index = name.rpartition("-")
        return PROCESS_ROLES.index(role), int(index)
    return sorted((n for n in members if n.rpartition("-")[0] in PROCESS_ROLES), key=order)


def uses_torchrun(argv: Sequence[str]) -> bool:
    """Whether a replica's command line starts torchrun (``torchrun ...`` or ``python -m torch.distributed.run``)."""
    args = list(argv)
    if args and os.path.basename(args[0]) in _TORCHRUN_COMMANDS:
        return True
    return any(a == "-m" and b in _TORCHRUN_MODULES for a, b in zip(args, args[1:]))


def framework_env(framework: str, members: Mapping[str, str], replica: str, *,
                  torchrun: bool = False) -> dict[str, str]:
    """The variables ``framework``'s launcher reads, for ``replica`` (a name like ``worker-1``).

    ``members`` maps every replica's name to its ``host:port``. TensorFlow gets nothing here (its
    variables are TF_CONFIG's), and neither does a replica outside the process group.
    """
    if framework == "tensorflow":
        return {}
    if framework not in FRAMEWORKS:
        raise ValueError(f"framework {framework!r} is not one of {', '.join(FRAMEWORKS)}")
    order = process_names(members)
    if replica not in order:
        return {}
    rank, size = order.index(replica), len(order)
    coordinator = members[order[0]]
    if framework == "jax":
        return {
            "JAX_COORDINATOR_ADDRESS": coordinator,
            "JAX_NUM_PROCESSES": str(size),
            "JAX_PROCESS_ID": str(rank),
            "KERAS_DISTRIBUTION_JOB_ADDRESSES": ",".join(members[n] for n in order),
            "KERAS_DISTRIBUTION_NUM_PROCESSES": str(size),
            "KERAS_DISTRIBUTION_PROCESS_ID": str(rank),
        }
    host, _, port = coordinator.rpartition(":")
    host = host.strip("[]")  # an IPv6 literal is bracketed in host:port, bare in MASTER_ADDR
    env = {"MASTER_ADDR": host, "MASTER_PORT": port, "WORLD_SIZE": str(size), "RANK": str(rank), "LOCAL_RANK": "0"}
    if torchrun:
        env.update(PET_MASTER_ADDR=host, PET_MASTER_PORT=port, PET_NNODES=str(size), PET_NODE_RANK=str(rank),
                   PET_NPROC_PER_NODE="1")
    return env


def vertex_members(cluster_spec: Mapping) -> tuple[dict[str, str], str]:
    """Vertex AI's CLUSTER_SPEC as ``({replica name: host:port}, this replica)``: workerpool0 is the
    chief (process 0), workerpool1 the workers; parameter servers and evaluators are no processes."""
    pools = cluster_spec.get("cluster", {})
    task = cluster_spec.get("task", {})
    roles = {"workerpool0": "chief", "workerpool1": "worker"}
    members = {f"{roles[p]}-{i}": a for p in roles for i, a in enumerate(pools.get(p, []))}
    role = roles.get(task.get("type", ""), str(task.get("type")))
    return members, f"{role}-{int(task.get('index', 0))}"


def main(argv: list[str] | None = None) -> int:
    """``python -m multiworker.framework_env -- COMMAND...``: on Vertex AI, add the variables of the
    framework named by ``MW_FRAMEWORK`` that the platform did not set (from CLUSTER_SPEC), then exec."""
    import json
    import sys

    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--"]:
        args = args[1:]
    if not args:
        sys.stderr.write("usage: python -m multiworker.framework_env -- COMMAND [ARGS...]\n")
        return 2
    framework = os.environ.get("MW_FRAMEWORK", DEFAULT_FRAMEWORK)
    raw = os.environ.get("CLUSTER_SPEC")
    if raw:
        try:
            members, replica = vertex_members(json.loads(raw))
            env = framework_env(framework, members, replica, torchrun=uses_torchrun(args))
        except (ValueError, TypeError, AttributeError) as exc:
            sys.stderr.write(f"error: multiworker.framework_env: CLUSTER_SPEC or MW_FRAMEWORK is malformed: {exc}\n")
            return 2
        for name, value in env.items():
            os.environ.setdefault(name, value)  # what the platform set itself wins
    try:
        os.execvp(args[0], args)
    except OSError as exc:
        sys.stderr.write(f"error: multiworker.framework_env: cannot run {args[0]!r}: {exc}\n")
        return 127


if __name__ == "__main__":
    raise SystemExit(main())
