"""Kubeflow TFJob ``kubeflow.org/v1``: replica types, the pod template's `tensorflow` container,
runPolicy and successPolicy (TFJob operator 1.9 meanings)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict
from pydantic.alias_generators import to_snake

from multiworker.errors import SpecError
from multiworker.spec.formats.common import (
    CamelModel,
    Parsed,
    Str,
    finish,
    job_name,
    program_of,
    unknown_key,
    validate,
)

__all__ = ["parse", "REPLICA_TYPES", "CONTAINER", "RESTART_STRICTNESS", "INSTANCE_TYPE_LABEL", "ACCELERATOR_LABEL",
           "GPU_RESOURCE", "AIP_DIRS"]

# Replica type -> native role; Master is a chief whose TF_CONFIG task type is `master`.
REPLICA_TYPES = {"Chief": "chief", "Master": "chief", "Worker": "worker", "PS": "ps", "Evaluator": "evaluator"}
CONTAINER = "tensorflow"  # the operator sets TF_CONFIG only in the container with this name
RESTART_STRICTNESS = ("Never", "ExitCode", "OnFailure", "Always")  # strictest first
INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
INSTANCE_TYPE_LABEL = INSTANCE_TYPE_LABELS[0]
ACCELERATOR_LABEL = "cloud.google.com/gke-accelerator"
GPU_RESOURCE = "nvidia.com/gpu"
# The output directory reaches the program as the AIP_* variables the local launcher sets.
AIP_DIRS = {"AIP_MODEL_DIR": "model", "AIP_CHECKPOINT_DIR": "checkpoints", "AIP_TENSORBOARD_LOG_DIR": "logs"}

# Pod and container fields of the CRD (kubeflow/training-operator v1.9.0) by the kind of note they get.
_POD_KINDS = {
    "storage": ("volumes",),
    "network": (
        "serviceAccount", "serviceAccountName", "automountServiceAccountToken", "imagePullSecrets",
        "securityContext", "hostNetwork", "hostIPC", "hostPID", "hostUsers", "dnsPolicy", "dnsConfig",
        "hostAliases", "hostname", "subdomain", "setHostnameAsFQDN", "enableServiceLinks",
    ),
    "scheduling": (
        "affinity", "tolerations", "nodeName", "priority", "priorityClassName", "schedulerName",
        "topologySpreadConstraints", "preemptionPolicy", "runtimeClassName", "schedulingGates", "overhead",
        "resourceClaims", "readinessGates", "os", "activeDeadlineSeconds",
    ),
    "container": ("initContainers", "ephemeralContainers", "shareProcessNamespace", "restartPolicy"),
}
_CONTAINER_KINDS = {
    "storage": ("volumeMounts", "volumeDevices"),
    "container": (
        "envFrom", "imagePullPolicy", "lifecycle", "livenessProbe", "ports", "readinessProbe", "resizePolicy",
        "restartPolicy", "securityContext", "startupProbe", "stdin", "stdinOnce", "terminationMessagePath",
        "terminationMessagePolicy", "tty",
    ),
}
_MOVED_TO_RUN_POLICY = ("cleanPodPolicy", "ttlSecondsAfterFinished", "backoffLimit", "activeDeadlineSeconds")


class _Open(CamelModel):
    """Kubernetes objects with more fields than multiworker reads; extras are checked by name."""

    model_config = ConfigDict(extra="allow")


class EnvVar(CamelModel):
    name: str
    value: Str | None = None
    value_from: dict | None = None


class Resources(CamelModel):
    limits: dict[str, Str] | None = None
    requests: dict[str, Str] | None = None
    claims: list[dict] | None = None


class Container(_Open):
    name: str
    image: str | None = None
    command: list[Str] | None = None
    args: list[Str] | None = None
    env: list[EnvVar] | None = None
    resources: Resources | None = None
    working_dir: str | None = None


class PodSpec(_Open):
    containers: list[Container]
    node_selector: dict[str, str] | None = None
    termination_grace_period_seconds: int | None = None


class PodTemplate(CamelModel):
    metadata: dict | None = None
    spec: PodSpec


class ReplicaSpec(CamelModel):
    replicas: int = 1
    restart_policy: Literal["Always", "OnFailure", "Never", "ExitCode"] | None = None
    template: PodTemplate


class RunPolicy(CamelModel):
    backoff_limit: int | None = None
    active_deadline_seconds: int | None = None
    clean_pod_policy: Literal["None", "Running", "All"] | None = None
    ttl_seconds_after_finished: int | None = None
    scheduling_policy: dict | None = None
    suspend: bool | None = None
    managed_by: str | None = None


class TFJobSpec(CamelModel):
    tf_replica_specs: dict[str, ReplicaSpec]
    run_policy: RunPolicy | None = None
    success_policy: Literal["", "AllWorkers"] | None = None
    enable_dynamic_worker: bool | None = None


class TFJob(CamelModel):
    api_version: str
    kind: str
    metadata: dict | None = None
    spec: TFJobSpec
    status: dict | None = None  # ignored, as `kubectl get -o yaml` prints it


def parse(data: Any, *, source: str, path: Path | None = None) -> Parsed:
    """Read a TFJob manifest into a native spec dict."""
    data, legacy = _legacy_run_policy(data, source=source)
    job = validate(TFJob, data, source=source)
    if job.api_version != "kubeflow.org/v1":
        raise SpecError(f"is {job.api_version!r}; multiworker reads kubeflow.org/v1 TFJobs", source=source, field="apiVersion")
    if job.kind != "TFJob":
        raise SpecError(f"is {job.kind!r}; multiworker reads kind: TFJob", source=source, field="kind")
    parsed = Parsed(format="tfjob", native={})
    if legacy:
        fields = ", ".join(f"spec.{k}" for k in legacy)
        parsed.notes.append(
            f"{fields}: run policy directly under spec, as the Kubeflow 1.0-era operator read it; taken as "
            "spec.runPolicy (its place today, where `convert --to tfjob` writes it)"
        )
    meta = job.metadata or {}
    for key in ("namespace", "labels", "annotations"):
        if meta.get(key):
            parsed.drop("metadata", f"metadata.{key}")

    specs = _replica_types(job.spec.tf_replica_specs, source=source)
    pools: dict[str, dict] = {}
    graces: dict[str, int] = {}
    policies: dict[str, str] = {}
    for rtype, (key, spec) in specs.items():
        where = f"spec.tfReplicaSpecs.{key}"
        if spec.replicas < 0:
            raise SpecError(f"is {spec.replicas}; it must be 0 or more", source=source, field=f"{where}.replicas")
        if spec.replicas == 0:
            continue
        role = REPLICA_TYPES[rtype]
        pools[role] = _pool(parsed, role, spec, source=source, where=where)
        policies[key] = spec.restart_policy or "Never"
        if spec.template.spec.termination_grace_period_seconds is not None:
            graces[key] = spec.template.spec.termination_grace_period_seconds

    run_policy = _run_policy(parsed, job.spec, policies, graces)
    out: dict[str, Any] = {"run_policy": run_policy}
    output = _output_dir(pools)
    if output:
        out["output_dir"] = output
    if "Master" in specs:
        out["chief_task_type"] = "master"
    for key in ("name", "generateName"):
        if key in meta and not isinstance(meta[key], str):
            raise SpecError(f"is {meta[key]!r}, not a name; quote it or write a DNS-1123 name such as my-job",
                            source=source, field=f"metadata.{key}")
    name = meta.get("name") or (meta.get("generateName") or "").rstrip("-") or None
    return finish(parsed, job_name(name, path), pools, out)


def _legacy_run_policy(data: Any, *, source: str) -> tuple[Any, list[str]]:
    """Run policy written directly under ``spec`` (TFJob operator 1.0): moved under spec.runPolicy."""
    if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
        return data, []
    legacy = [key for key in data["spec"] if key in _MOVED_TO_RUN_POLICY]
    if not legacy:
        return data, []
    spec = dict(data["spec"])
    run_policy = spec.get("runPolicy")
    run_policy = dict(run_policy) if isinstance(run_policy, dict) else {}
    for key in legacy:
        if key in run_policy:
            raise SpecError(
                f"is also set in spec.runPolicy.{key}; keep only spec.runPolicy.{key} (the current place)",
                source=source,
                field=f"spec.{key}",
            )
        run_policy[key] = spec.pop(key)
    spec["runPolicy"] = run_policy
    return {**data, "spec": spec}, legacy


def _output_dir(pools: dict[str, dict]) -> str | None:
    """The output directory when every pool's env holds the AIP_* trio under one base (as converted)."""
    bases = set()
    for pool in pools.values():
        env = pool.get("env") or {}
        base = env.get("AIP_MODEL_DIR", "").rstrip("/").rpartition("/")[0]
        if not base or any(env.get(k, "").rstrip("/") != f"{base}/{d}" for k, d in AIP_DIRS.items()):
            return None
        bases.add(base)
    if len(bases) != 1:
        return None
    for pool in pools.values():
        for key in AIP_DIRS:
            del pool["env"][key]
    return bases.pop()


def _replica_types(specs: dict[str, ReplicaSpec], *, source: str) -> dict[str, tuple[str, ReplicaSpec]]:
    """Replica specs by canonical type (Chief, Master, Worker, PS, Evaluator), keeping the file's key."""
    canonical = {t.lower(): t for t in REPLICA_TYPES}
    out: dict[str, tuple[str, ReplicaSpec]] = {}
    for key, spec in specs.items():
        rtype = canonical.get(key.lower())
        if rtype is None:
            raise unknown_key(key, REPLICA_TYPES, source=source, field=f"spec.tfReplicaSpecs.{key}")
        out[rtype] = (key, spec)
    chiefs = [out[t] for t in ("Chief", "Master") if t in out]
    if len(chiefs) == 2:
        raise SpecError(
            "has both Chief and Master; a TFJob has one chief. Keep Chief (or Master for TF 1 style task types)",
            source=source,
            field="spec.tfReplicaSpecs",
        )
    for key, spec in chiefs:
        if spec.replicas > 1:
            raise SpecError(
                f"is {spec.replicas}; a job has at most one chief. Set it to 1 and move the extra replicas to Worker",
                source=source,
                field=f"spec.tfReplicaSpecs.{key}.replicas",
            )
    if "Evaluator" in out and out["Evaluator"][1].replicas > 1:
        key = out["Evaluator"][0]
        raise SpecError(
            f"is {out['Evaluator'][1].replicas}; TensorFlow runs at most one evaluator",
            source=source,
            field=f"spec.tfReplicaSpecs.{key}.replicas",
        )
    return out


def _pool(parsed: Parsed, role: str, spec: ReplicaSpec, *, source: str, where: str) -> dict:
    pod = spec.template.spec
    pod_field = f"{where}.template.spec"
    names = [c.name for c in pod.containers]
    if CONTAINER not in names:
        raise SpecError(
            f"no container named `{CONTAINER}` (found: {', '.join(names) or 'none'}); the TFJob operator sets "
            f"TF_CONFIG only in the `{CONTAINER}` container: rename the training container",
            source=source,
            field=f"{pod_field}.containers",
        )
    index = names.index(CONTAINER)
    container = pod.containers[index]
    cfield = f"{pod_field}.containers[{index}]"
    for i, name in enumerate(names):
        if i != index:
            parsed.drop("container", f"{pod_field}.containers[{i}] ({name})")
    _check_extras(parsed, pod, _POD_KINDS, source=source, field=pod_field)
    _check_extras(parsed, container, _CONTAINER_KINDS, source=source, field=cfield)
    if spec.template.metadata:
        parsed.drop("metadata", f"{where}.template.metadata")
    if not container.image:
        raise SpecError("is required: the image the replica runs", source=source, field=f"{cfield}.image")

    out: dict[str, Any] = {"replicas": spec.replicas, "image": container.image}
    out.update(program_of(container.command, container.args))
    parsed.origins[f"pools.{role}.args"] = f"{cfield}.args"
    if container.command and "module" not in out:
        parsed.origins[f"pools.{role}.command"] = f"{cfield}.command"
    out["env"] = {}
    for j, var in enumerate(container.env or []):
        if var.value_from is not None:
            parsed.drop("container", f"{cfield}.env[{j}].valueFrom ({var.name})")
            continue
        out["env"][var.name] = var.value or ""
        parsed.origins[f"pools.{role}.env.{var.name}"] = f"{cfield}.env[{j}].value"
    if container.working_dir:
        parsed.workdirs[role] = (container.working_dir, f"{cfield}.workingDir")
        parsed.drop("container", f"{cfield}.workingDir")
    machine = _machine(parsed, pod, container, pod_field=pod_field, cfield=cfield, source=source)
    if machine:
        out["machine"] = machine
    return out


def _check_extras(parsed: Parsed, obj: _Open, kinds: dict[str, tuple[str, ...]], *, source: str, field: str) -> None:
    known = {name: kind for kind, names in kinds.items() for name in names}
    for key, value in (obj.model_extra or {}).items():
        if key not in known:
            allowed = [f.alias or n for n, f in type(obj).model_fields.items()] + list(known)
            raise unknown_key(key, allowed, source=source, field=f"{field}.{key}")
        if value not in (None, [], {}, False):
            parsed.drop(known[key], f"{field}.{key}")


def _machine(parsed: Parsed, pod: PodSpec, container: Container, *, pod_field: str, cfield: str,
             source: str) -> dict:
    machine: dict[str, Any] = {}
    for label, value in (pod.node_selector or {}).items():
        if label in INSTANCE_TYPE_LABELS:
            machine["machine_type"] = value
        elif label == ACCELERATOR_LABEL:
            machine["accelerator_type"] = value.upper().replace("-", "_")
        else:
            parsed.drop("scheduling", f"{pod_field}.nodeSelector.{label}")
            continue
        parsed.keep("machine", f"{pod_field}.nodeSelector")
    resources = container.resources
    if resources:
        chosen = resources.limits or resources.requests or {}
        for name, value in chosen.items():
            if name == GPU_RESOURCE:
                if not (isinstance(value, str) and value.isascii() and value.isdigit()) and not isinstance(value, int):
                    raise SpecError(f"{value!r} is not a whole number of GPUs; write it like \"1\"", source=source,
                                    field=f"{cfield}.resources.limits.{GPU_RESOURCE}")
                machine["accelerator_count"] = int(value)
            elif name in ("cpu", "memory"):
                machine[name] = value
            else:
                parsed.drop("container", f"{cfield}.resources.{name}")
                continue
            parsed.keep("machine", f"{cfield}.resources")
        if resources.limits and resources.requests and resources.requests != resources.limits:
            parsed.drop("container", f"{cfield}.resources.requests")
        if resources.claims:
            parsed.drop("container", f"{cfield}.resources.claims")
    return machine


def _run_policy(parsed: Parsed, spec: TFJobSpec, policies: dict[str, str], graces: dict[str, int]) -> dict:
    out: dict[str, Any] = {}
    if policies:
        chosen = min(policies.values(), key=RESTART_STRICTNESS.index)
        out["restart_policy"] = chosen
        if len(set(policies.values())) > 1:
            detail = ", ".join(f"{k}: {v}" for k, v in policies.items())
            parsed.notes.append(
                f"restartPolicy differs by replica type ({detail}); a local job restarts its whole group under one "
                f"policy, so it uses the strictest: {chosen}"
            )
            key = next(k for k, v in policies.items() if v != chosen)
            parsed.conflicts.append(
                (f"spec.tfReplicaSpecs.{key}.restartPolicy",
                 f"restartPolicy differs by replica type ({detail}); the native spec has one run_policy.restart_policy")
            )
    if graces:
        out["grace_period"] = max(graces.values())
        if len(set(graces.values())) > 1:
            key = next(k for k, v in graces.items() if v != out["grace_period"])
            parsed.conflicts.append(
                (f"spec.tfReplicaSpecs.{key}.template.spec.terminationGracePeriodSeconds",
                 "terminationGracePeriodSeconds differs by replica type; the native spec has one grace_period")
            )
    rp = spec.run_policy
    if rp is not None:
        if rp.backoff_limit is not None:
            out["backoff_limit"] = rp.backoff_limit
        if rp.active_deadline_seconds is not None:
            out["active_deadline"] = rp.active_deadline_seconds
        for key, kind in (("cleanPodPolicy", "lifecycle"), ("ttlSecondsAfterFinished", "lifecycle"),
                          ("suspend", "lifecycle"), ("managedBy", "lifecycle"), ("schedulingPolicy", "scheduling")):
            value = getattr(rp, to_snake(key))
            if value not in (None, False, {}):
                parsed.drop(kind, f"spec.runPolicy.{key}")
    if spec.success_policy == "AllWorkers":
        out["success_policy"] = "all_workers"
    if spec.enable_dynamic_worker:
        parsed.drop("scheduling", "spec.enableDynamicWorker")
    return out
