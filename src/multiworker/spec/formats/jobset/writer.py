"""Native spec -> JobSet ``jobset.x-k8s.io/v1alpha2`` manifest (kubernetes-sigs/jobset v0.12.0).

One replicated job per role, each an Indexed Job with one pod per replica, reachable through the
JobSet's headless service as ``<jobset>-<role>-0-<index>.<jobset>``. Each pod builds its TF_CONFIG
in the pod (``multiworker.k8s_entry``) from ``MW_CLUSTER`` and its completion index.

Failures restart the whole JobSet (every Job has ``backoffLimit: 0``) up to ``maxRestarts``
(``backoff_limit``; 0 for ``Never``). ``ExitCode``: a pod failure policy fails its Job at once on exit
codes 1-127 and a JobSet rule turns that reason into FailJobSet; signals (128+) restart.
Success: the chief's replicated job (worker 0 through the worker Job's success policy without one).
"""

from __future__ import annotations

import json
from typing import Any

from multiworker.errors import SpecError
from multiworker.spec.formats.frameworks import framework_vars
from multiworker.spec.formats.jobset.reader import ENTRY
from multiworker.spec.formats.target import (
    DNS_1035,
    Target,
    check_hostnames,
    cloud_path,
    dns_1035_label,
    env_list,
    safe_name,
    seconds,
)
from multiworker.spec.formats.tfjob import writer as to_tfjob
from multiworker.spec.formats.tfjob.reader import CONTAINER

__all__ = ["write", "PORT", "API_VERSION", "hostnames", "PROGRAM_ERROR_RULE", "DEADLINE_RULE"]

PLATFORM = "JobSet"
API_VERSION = "jobset.x-k8s.io/v1alpha2"
PORT = 2222  # the TFJob operator's default port, for every task
PROGRAM_ERROR_RULE = "program-error"
DEADLINE_RULE = "deadline"


def hostnames(name: str, counts: dict[str, int]) -> dict[str, list[str]]:
    """``role -> [host:port]``: JobSet pod hostnames ``<jobset>-<rjob>-<job index>-<pod index>.<subdomain>``."""
    return {role: [f"{name}-{role}-0-{i}.{name}:{PORT}" for i in range(n)] for role, n in counts.items()}


def write(t: Target) -> dict:
    spec = t.spec
    policy = spec.run_policy
    output = cloud_path(t, "output_dir", spec.output_dir, PLATFORM, absolute_ok=True)
    counts = spec.replica_counts()
    name = safe_name(spec.name, DNS_1035, dns_1035_label, t, PLATFORM)
    # JobSet's own check: ``<jobset>-<rjob>-<job index>-<pod index>`` is a pod hostname
    check_hostnames(t, name, [f"{name}-{role}-0-{n - 1}" for role, n in counts.items()], "pod hostname")
    cluster = json.dumps(hostnames(name, counts), separators=(",", ":"))
    exit_code = policy.restart_policy == "ExitCode"
    jobs = [_replicated_job(t, role, n, cluster, output, exit_code=exit_code) for role, n in counts.items()]
    if policy.restart_policy == "Always":
        t.notes.append("run_policy.restart_policy Always restarts on JobSet like OnFailure: a JobSet that "
                       "succeeded is never restarted")
    rules = []
    if exit_code:
        rules.append({"name": PROGRAM_ERROR_RULE, "action": "FailJobSet", "onJobFailureReasons": ["PodFailurePolicy"]})
    if policy.active_deadline is not None:
        rules.append({"name": DEADLINE_RULE, "action": "FailJobSet", "onJobFailureReasons": ["DeadlineExceeded"]})
        t.notes.append("run_policy.active_deadline is each Job's activeDeadlineSeconds on JobSet: the clock "
                       "starts again when the JobSet restarts")
    failure: dict[str, Any] = {"maxRestarts": 0 if policy.restart_policy == "Never" else policy.backoff_limit}
    if rules:
        failure["rules"] = rules
    if "evaluator" in counts:
        t.notes.append("the evaluator stops when the JobSet succeeds; it cannot finish a last evaluation")
    body = {
        "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
        "failurePolicy": failure,
        "successPolicy": {"operator": "All", "targetReplicatedJobs": _success_targets(spec, counts)},
        "replicatedJobs": jobs,
    }
    return {"apiVersion": API_VERSION, "kind": "JobSet", "metadata": {"name": name}, "spec": body}


def _success_targets(spec, counts: dict[str, int]) -> list[str]:
    if spec.run_policy.success_policy == "all_workers":
        return [r for r in ("chief", "worker") if r in counts]
    return ["chief"] if "chief" in counts else ["worker"]


def _replicated_job(t: Target, role: str, replicas: int, cluster: str, output: str | None, *, exit_code: bool) -> dict:
    pod = to_tfjob.pod(t, role, output, PLATFORM)
    container = pod["containers"][0]
    if "command" not in container:
        raise SpecError(
            f"pool {role} runs the image's entry point; JobSet pods build TF_CONFIG by wrapping the program, "
            "so set `module` (like trainer.task) or `command` to what the image runs",
            source=t.source, field=f"pools.{role}.command",
        )
    container["command"] = ENTRY + container["command"]
    own = {"MW_CLUSTER": cluster, "MW_ROLE": role}
    if role == "chief" and t.spec.chief_task_type == "master":
        own["MW_CHIEF_TASK_TYPE"] = "master"
    own.update(framework_vars(t, role))
    container["env"] = env_list(own) + container.get("env", [])
    container["ports"] = [{"name": "tf", "containerPort": PORT}]
    pod = {"restartPolicy": "Never", **pod}
    job: dict[str, Any] = {
        "parallelism": replicas,
        "completions": replicas,
        "completionMode": "Indexed",
        "backoffLimit": 0,  # any pod failure fails the Job, and the JobSet restarts as a group
    }
    if t.spec.run_policy.active_deadline is not None:
        job["activeDeadlineSeconds"] = seconds(t.spec.run_policy.active_deadline)
    if exit_code:
        job["podFailurePolicy"] = {"rules": [{
            "action": "FailJob",
            "onExitCodes": {"containerName": CONTAINER, "operator": "In", "values": list(range(1, 128))},
        }]}
    if role == "worker" and "chief" not in t.spec.replica_counts() and t.spec.run_policy.success_policy == "chief":
        job["successPolicy"] = {"rules": [{"succeededIndexes": "0"}]}  # worker 0 decides, as the chief would
    job["template"] = {"spec": pod}
    return {"name": role, "replicas": 1, "template": {"spec": job}}
