"""What each cloud format does for a job's framework (``framework: tensorflow | jax | pytorch``).

- TFJob sets TF_CONFIG only: TensorFlow jobs only (a PyTorch job goes to a PyTorchJob or a JobSet).
- AI Platform Training sets TF_CONFIG, and MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK for
  PyTorch jobs: TensorFlow and PyTorch.
- A PyTorchJob's operator sets the PyTorch variables: PyTorch jobs only.
- JobSet pods build every variable in the pod (``multiworker.k8s_entry``, told the framework by
  ``MW_FRAMEWORK``); Vertex AI containers are wrapped in ``multiworker.framework_env``, which adds from
  CLUSTER_SPEC what Vertex AI did not set. Both: every framework.
"""

from __future__ import annotations

from multiworker.errors import SpecError
from multiworker.framework_env import uses_torchrun
from multiworker.spec.formats.target import Target

__all__ = ["SUPPORTED", "check_framework", "framework_vars", "VERTEX_ENTRY"]

#: Target format -> the frameworks whose variables it gives replicas.
SUPPORTED = {"tfjob": ("tensorflow",), "aiplatform": ("tensorflow", "pytorch"), "pytorchjob": ("pytorch",)}
#: The container command prefix that adds a JAX or PyTorch job's variables on Vertex AI.
VERTEX_ENTRY = ["python", "-m", "multiworker.framework_env", "--"]


def check_framework(t: Target) -> None:
    """Refuse a target that cannot give the job's framework its variables, naming the formats that can."""
    supported = SUPPORTED.get(t.to)
    framework = t.spec.framework
    if supported is None or framework in supported:
        return
    others = [to for to, fws in SUPPORTED.items() if framework in fws] + ["jobset", "vertex"]
    raise SpecError(
        f"is {framework}, and a {t.to} job sets only {' and '.join(supported)}'s variables; convert with "
        f"--to {' or --to '.join(o for o in others if o != t.to)}",
        source=t.source, field="framework",
    )


def framework_vars(t: Target, role: str) -> dict[str, str]:
    """The ``MW_*`` variables that tell an in-pod or in-container entry the job's framework."""
    if t.spec.framework == "tensorflow":
        return {}
    out: dict[str, str] = {"MW_FRAMEWORK": t.spec.framework}
    command = t.command(t.spec.resolved(role))
    if command and uses_torchrun(command):
        out["MW_TORCHRUN"] = "1"
    return out
