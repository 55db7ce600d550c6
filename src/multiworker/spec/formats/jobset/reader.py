"""JobSet ``jobset.x-k8s.io/v1alpha2`` manifests as ``multiworker convert --to jobset`` writes them.

Read by mapping them onto the TFJob reader: one replicated job per role (chief, worker, ps,
evaluator) with ``replicas: 1`` and one pod per completion index; the ``multiworker.k8s_entry``
wrapper and its ``MW_*`` variables are taken off the command; ``failurePolicy`` gives the restart
policy back (no restarts: Never; the program-error rule: ExitCode; else OnFailure).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from multiworker.errors import SpecError
from multiworker.spec.formats.common import Parsed
from multiworker.spec.formats.schema import check_schema
from multiworker.spec.formats.tfjob import reader as tfjob

#: The container command prefix that runs ``multiworker.k8s_entry`` (TF_CONFIG from the pod's JobSet
#: index) before the trainer's own command; written by the JobSet writer, taken off by the reader.
ENTRY = ["python", "-m", "multiworker.k8s_entry", "--"]

__all__ = ["parse"]

_TYPES = {"chief": "Chief", "worker": "Worker", "ps": "PS", "evaluator": "Evaluator"}
_OWN_ENV = ("MW_CLUSTER", "MW_ROLE", "MW_CHIEF_TASK_TYPE", "MW_FRAMEWORK", "MW_TORCHRUN")


def parse(data: Any, *, source: str, path: Path | None = None) -> Parsed:
    """Read a JobSet manifest into a native spec dict (through the TFJob reader)."""
    check_schema(data, "jobset", source=source)
    spec = data["spec"]
    failure = spec.get("failurePolicy") or {}
    max_restarts = failure.get("maxRestarts", 0)
    reasons = {r for rule in failure.get("rules", []) if rule.get("action") == "FailJobSet"
               for r in rule.get("onJobFailureReasons", [])}
    restart = "Never" if not max_restarts else ("ExitCode" if "PodFailurePolicy" in reasons else "OnFailure")
    replica_specs: dict[str, Any] = {}
    deadlines: list[int] = []
    worker0_decides = False
    framework = None
    for i, rjob in enumerate(spec["replicatedJobs"]):
        where = f"spec.replicatedJobs[{i}]"
        role = rjob["name"]
        if role not in _TYPES:
            raise SpecError(f"is {role!r}; multiworker reads one replicated job per role, named "
                            f"{', '.join(_TYPES)}", source=source, field=f"{where}.name")
        if rjob.get("replicas", 1) != 1:
            raise SpecError(f"is {rjob['replicas']}; each role is one Job whose completions are its replicas: "
                            "set replicas: 1 and completions to the replica count", source=source,
                            field=f"{where}.replicas")
        job = rjob["template"]["spec"]
        replicas = job.get("completions", job.get("parallelism", 1))
        if "activeDeadlineSeconds" in job:
            deadlines.append(job["activeDeadlineSeconds"])
        if role == "worker" and (job.get("successPolicy") or {}).get("rules") == [{"succeededIndexes": "0"}]:
            worker0_decides = True
        template = copy.deepcopy(job["template"])
        pod = template.get("spec", {})
        pod.pop("restartPolicy", None)
        rtype = _TYPES[role]
        for container in pod.get("containers", []):
            if container.get("name") != tfjob.CONTAINER:
                continue
            env = container.get("env") or []
            if role == "chief" and any(e.get("name") == "MW_CHIEF_TASK_TYPE" and e.get("value") == "master" for e in env):
                rtype = "Master"
            framework = next((e.get("value") for e in env if e.get("name") == "MW_FRAMEWORK"), framework)
            container["env"] = [e for e in env if e.get("name") not in _OWN_ENV]
            command = container.get("command") or []
            if command[:len(ENTRY)] == ENTRY:
                container["command"] = command[len(ENTRY):]
            if container.get("ports") == [{"name": "tf", "containerPort": 2222}]:
                del container["ports"]
        replica_specs[rtype] = {"replicas": replicas, "restartPolicy": restart, "template": template}
    targets = set((spec.get("successPolicy") or {}).get("targetReplicatedJobs") or [])
    run_policy: dict[str, Any] = {"backoffLimit": max_restarts} if max_restarts else {}
    if deadlines:
        run_policy["activeDeadlineSeconds"] = max(deadlines)
    body: dict[str, Any] = {"tfReplicaSpecs": replica_specs, "runPolicy": run_policy}
    has_chief = "chief" in {r["name"] for r in spec["replicatedJobs"]}
    if ("worker" in targets and has_chief) or ("worker" in targets and not worker0_decides):
        body["successPolicy"] = "AllWorkers"
    as_tfjob = {"apiVersion": "kubeflow.org/v1", "kind": "TFJob",
                "metadata": {k: v for k, v in data["metadata"].items() if k in ("name", "generateName", "namespace",
                                                                                 "labels", "annotations")},
                "spec": body}
    parsed = tfjob.parse(as_tfjob, source=source, path=path)
    parsed.format = "jobset"
    if framework:
        parsed.native["framework"] = framework
    return parsed
