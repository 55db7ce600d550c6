"""The Kubernetes API as multiworker uses it: config as kubectl finds it, the two job kinds
(JobSet, TFJob) and their pod labels, and every API failure mapped once to a one-line error
naming the cluster and the fix."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from typing import Any

from multiworker.errors import UserError

__all__ = ["delete_object", "Kind", "KINDS", "Cluster", "connect", "JOBSET_INSTALL"]

log = logging.getLogger(__name__)

JOBSET_VERSION = "v0.12.0"
JOBSET_INSTALL = ("kubectl apply --server-side -f https://github.com/kubernetes-sigs/jobset/releases/download/"
                  f"{JOBSET_VERSION}/manifests.yaml")
TFJOB_INSTALL = ('kubectl apply --server-side -k "github.com/kubeflow/training-operator.git/manifests/overlays/'
                 'standalone?ref=v1.9.0"')


@dataclasses.dataclass(frozen=True)
class Kind:
    """A job kind: its API coordinates and how its pods are labelled (role, index, restart attempt)."""

    api: str
    group: str
    version: str
    plural: str
    kind: str
    owner_label: str  # pod label whose value is the object's name
    role_label: str
    index_label: str  # also looked up in annotations
    attempt_label: str | None
    install: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


KINDS = {
    # kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go (JobSetNameKey, ReplicatedJobNameKey),
    # pkg/constants (RestartsKey); Kubernetes sets batch.kubernetes.io/job-completion-index on Indexed Job pods.
    "jobset": Kind("jobset", "jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet", "jobset.sigs.k8s.io/jobset-name",
                   "jobset.sigs.k8s.io/replicatedjob-name", "batch.kubernetes.io/job-completion-index",
                   "jobset.sigs.k8s.io/restart-attempt", JOBSET_INSTALL),
    # kubeflow/training-operator v1.9 (pkg/apis/kubeflow.org/v1/common_types.go): JobNameLabel, ReplicaTypeLabel,
    # ReplicaIndexLabel; replica types are lower-cased in the label ("worker", "chief", "master", "ps").
    "tfjob": Kind("tfjob", "kubeflow.org", "v1", "tfjobs", "TFJob", "training.kubeflow.org/job-name",
                  "training.kubeflow.org/replica-type", "training.kubeflow.org/replica-index", None, TFJOB_INSTALL),
}


class Cluster:
    """One connection: the API client, and the words that name the cluster in errors."""

    def __init__(self, api_client: Any, *, context: str | None, server: str, namespace: str = "default"):
        from kubernetes import client

        self.api_client = api_client
        self.context = context
        self.namespace = namespace  # the context's namespace, as kubectl uses it
        self.server = server
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)

    @property
    def where(self) -> str:
        return f"context {self.context} ({self.server})" if self.context else f"cluster {self.server}"

    def error(self, exc: Exception, doing: str, *, kind: Kind | None = None, namespace: str | None = None) -> UserError:
        """A one-line error for an API failure: what was being done, on which cluster, and the fix."""
        from kubernetes.client.exceptions import ApiException

        if isinstance(exc, ApiException):
            status = exc.status
            detail = _message(exc)
            if status == 401:
                fix = ("the credentials were refused; refresh them (for GKE: gcloud container clusters "
                       "get-credentials CLUSTER) or choose another with --context")
            elif status == 403:
                fix = f"your account may not do this in namespace {namespace}; ask for a Role that allows it ({detail})"
            elif status == 404 and kind is not None and doing.startswith("create"):
                fix = f"the {kind.kind} API ({kind.api_version}) is not installed there; install it: {kind.install}"
            elif status == 409:
                fix = f"it already exists ({detail}); delete it or rename the job"
            else:
                fix = detail or exc.reason or "see the API server's logs"
            return UserError(f"kubernetes {self.where}: {doing}: {status} {exc.reason}: {fix}")
        return UserError(f"kubernetes {self.where}: {doing}: cannot reach the API server ({_unreachable(exc)}); "
                         "check the cluster is up and the context is right: kubectl cluster-info")


def _message(exc) -> str:
    try:
        return json.loads(exc.body).get("message", "")
    except (TypeError, ValueError, AttributeError):
        return ""


def _short(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def _unreachable(exc: Exception) -> str:
    """Why a connection failed, in a few words: urllib3's MaxRetryError wraps the last error in
    ``reason`` and its text in object reprs ("[Errno 111] Connection refused", "timed out", a TLS error)."""
    reason: Any = exc
    while getattr(reason, "reason", None) is not None and isinstance(reason.reason, BaseException):
        reason = reason.reason
    text = str(reason)
    found = re.search(r"\[Errno -?\d+\] [^'\")(]+", text) or re.search(r"(?:CERTIFICATE_VERIFY_FAILED|certificate "
                                                                       r"verify failed)[^'\")]*", text)
    if found:
        return found.group(0).strip()
    if "timed out" in text.lower():
        return "connection timed out"
    return _short(reason) if isinstance(reason, Exception) else _short(exc)


def connect(context: str | None = None) -> Cluster:
    """Connect as kubectl would: KUBECONFIG or ~/.kube/config (``context`` or the current one), else in-cluster."""
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ModuleNotFoundError as exc:
        raise UserError("--backend kubernetes: needs the 'kubernetes' package; "
                        "pip install 'multiworker[kubernetes]'") from exc
    paths = [p for p in os.environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    default = os.path.expanduser("~/.kube/config")
    has_file = any(os.path.exists(p) for p in paths) or (not paths and os.path.exists(default))
    configuration = client.Configuration()
    if has_file or context:
        try:
            where = os.environ.get("KUBECONFIG") or default  # read now: the client reads it at import
            config.load_kube_config(config_file=where, context=context, client_configuration=configuration)
            contexts, active = config.list_kube_config_contexts(config_file=where)
        except (ConfigException, OSError, ValueError) as exc:
            raise UserError(f"--context {context or '(current)'}: kubeconfig {where}: {_short(exc)}; "
                            "`kubectl config get-contexts` lists the contexts") from exc
        name = context or (active or {}).get("name")
        chosen = next((c for c in contexts if c["name"] == name), active) or {}
        namespace = chosen.get("context", {}).get("namespace") or "default"
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise UserError(f"kubernetes in-cluster config: {_short(exc)}; mount a service account token "
                            "or set KUBECONFIG") from exc
        name = None
        ns_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
        namespace = open(ns_file).read().strip() if os.path.exists(ns_file) else "default"
    else:
        raise UserError(f"kubernetes: no kubeconfig (KUBECONFIG is unset and {default} does not exist) and not "
                        "inside a cluster; set KUBECONFIG or pass --context after `kubectl config` sets one up")
    configuration.retries = 2
    # urllib3 logs a warning for each of those retries; the one-line error says what failed
    logging.getLogger("urllib3.connectionpool").setLevel(logging.ERROR)
    return Cluster(client.ApiClient(configuration), context=name, server=configuration.host, namespace=namespace)


def delete_object(cluster: Cluster, kind: Kind, namespace: str, name: str) -> None:
    """Delete the object (Foreground: its Jobs and pods first) and any pod left with its label."""
    from kubernetes.client.exceptions import ApiException

    try:
        cluster.custom.delete_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, name,
                                                       propagation_policy="Foreground")
    except ApiException as exc:
        if exc.status != 404:
            raise cluster.error(exc, f"delete {kind.kind} {namespace}/{name}", kind=kind, namespace=namespace) from exc
    except Exception as exc:  # noqa: BLE001 - connection errors
        raise cluster.error(exc, f"delete {kind.kind} {namespace}/{name}") from exc
    try:
        cluster.core.delete_collection_namespaced_pod(namespace, label_selector=f"{kind.owner_label}={name}",
                                                      grace_period_seconds=0)
    except Exception as exc:  # noqa: BLE001 - the garbage collector removes them anyway
        log.info("deleting pods of %s: %s", name, exc)
