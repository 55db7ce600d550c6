"""Scenarios on the fake API: a thread that plays the JobSet (or TFJob) controller, the Job
controller, the scheduler and the kubelet for the object the backend creates.

Where the shapes come from:
- JobSet status (``restarts``, ``terminalState``, ``conditions`` of type Completed/Failed, reason
  ``AllJobsCompleted``, message "jobset completed successfully", event reason ``Restarting``):
  kubernetes-sigs/jobset v0.12.0 ``api/jobset/v1alpha2/jobset_types.go`` and ``pkg/constants/constants.go``;
  the CRD in /work/shared/data/schemas/jobset/.
- JobSet pod labels and annotations (jobset-name, replicatedjob-name, job-index, restart-attempt) and
  hostnames ``<jobset>-<rjob>-<job index>-<pod index>`` under the JobSet's subdomain: same sources.
- ``batch.kubernetes.io/job-completion-index`` (label and annotation) and ``batch.kubernetes.io/job-name``:
  Kubernetes Jobs documentation, "Completion mode" (Indexed).
- Pod status (phase, podIP, hostIP, startTime, containerStatuses with state running/terminated, exitCode,
  reason Completed/Error, restartCount, lastState) and Events (involvedObject, reason Scheduled/Started/
  BackoffLimitExceeded, source, type, count, first/lastTimestamp): the Kubernetes API reference for
  core/v1 Pod and Event, and the kubelet / scheduler / job-controller reasons.
- TFJob status conditions (Created, Running, Restarting, Succeeded) and pod labels
  ``training.kubeflow.org/{job-name,replica-type,replica-index}``: kubeflow/training-operator v1.9
  ``pkg/apis/kubeflow.org/v1`` (common_types.go) and the TFJob CRD in /work/shared/data/schemas/.
"""

from __future__ import annotations

import threading
import time
import uuid

from fakes.kube_api import FakeKube, now
from multiworker.metrics_line import format_metric

__all__ = ["JobSetScenario", "TFJobScenario"]

NODE = "gke-pool-1-node-a"


def _event(fake: FakeKube, namespace: str, kind: str, name: str, reason: str, message: str, *,
           warning: bool = False, component: str = "kubelet") -> None:
    fake.put("events", {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {"kind": kind, "name": name, "namespace": namespace,
                           "apiVersion": "v1" if kind == "Pod" else "batch/v1"},
        "reason": reason, "message": message, "type": "Warning" if warning else "Normal",
        "source": {"component": component}, "count": 1, "firstTimestamp": now(), "lastTimestamp": now(),
    })


class _Scenario(threading.Thread):
    """Pods of each attempt: Pending -> Running (with log lines) -> the scenario's ending."""

    resource = ""

    def __init__(self, fake: FakeKube, *, fail: str | None = None, exit_code: int = 137, hold: bool = False,
                 compact_on_restart: bool = False, step: float = 0.3):
        super().__init__(daemon=True)
        self.fake, self.fail, self.exit_code, self.hold = fake, fail, exit_code, hold
        self.compact_on_restart, self.step = compact_on_restart, step
        self.obj: dict | None = None
        self.created = threading.Event()
        self.error: BaseException | None = None
        fake.on_create = self._on_create

    def _on_create(self, resource: str, obj: dict) -> None:
        if resource == self.resource and self.obj is None:
            self.obj = obj
            self.created.set()

    def run(self) -> None:
        try:
            self.created.wait(60)
            if self.obj is not None:
                self.play()
        except BaseException as exc:  # noqa: BLE001 - surfaced by the test
            self.error = exc

    @property
    def ns(self) -> str:
        return self.obj["metadata"]["namespace"]

    @property
    def name(self) -> str:
        return self.obj["metadata"]["name"]

    def alive(self) -> bool:
        return self.fake.get(self.resource, self.ns, self.name) is not None

    def replicas(self) -> list[tuple[str, int]]:
        raise NotImplementedError

    # -- pods -----------------------------------------------------------------------------------
    def pod(self, role: str, index: int, attempt: int) -> dict:
        raise NotImplementedError

    def container_status(self, state: dict, restarts: int = 0, last: dict | None = None) -> dict:
        out = {"name": "tensorflow", "image": "gcr.io/p/t:v1", "imageID": "gcr.io/p/t@sha256:" + "0" * 64,
               "containerID": f"containerd://{uuid.uuid4().hex}", "ready": "running" in state,
               "started": "running" in state, "restartCount": restarts, "state": state}
        if last:
            out["lastState"] = last
        return out

    def schedule(self, pod: dict) -> dict:
        pod = self.fake.put("pods", pod)
        _event(self.fake, self.ns, "Pod", pod["metadata"]["name"], "Scheduled",
               f"Successfully assigned {self.ns}/{pod['metadata']['name']} to {NODE}", component="default-scheduler")
        return pod

    def running(self, pod: dict, restarts: int = 0, last: dict | None = None) -> dict:
        pod["spec"]["nodeName"] = NODE
        pod["status"] = {"phase": "Running", "hostIP": "10.128.0.7", "podIP": f"10.4.0.{len(pod['metadata']['name'])}",
                         "startTime": now(),
                         "containerStatuses": [self.container_status({"running": {"startedAt": now()}}, restarts, last)]}
        _event(self.fake, self.ns, "Pod", pod["metadata"]["name"], "Started", "Started container tensorflow")
        return self.fake.put("pods", pod)

    def terminated(self, pod: dict, code: int, restarts: int = 0) -> dict:
        state = {"terminated": {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                                "startedAt": now(), "finishedAt": now()}}
        pod["status"]["phase"] = "Succeeded" if code == 0 else "Failed"
        pod["status"]["containerStatuses"] = [self.container_status(state, restarts)]
        return self.fake.put("pods", pod)

    def log(self, pod: dict, text: str, *, done: bool = False) -> None:
        self.fake.write_log(self.ns, pod["metadata"]["name"], text, done=done)

    def start_attempt(self, attempt: int) -> dict[str, dict]:
        pods = {f"{r}-{i}": self.schedule(self.pod(r, i, attempt)) for r, i in self.replicas()}
        time.sleep(self.step)
        for rid, pod in pods.items():
            pods[rid] = self.running(pod)
            self.log(pod, f"{rid} attempt {attempt}: starting\n")
        time.sleep(self.step)
        for rid, pod in pods.items():  # written while the log is being followed
            self.log(pod, f"{rid} attempt {attempt}: step 1\n"
                          + format_metric("epoch", epoch=1, epochs=2, loss=0.9 - 0.1 * attempt) + "\n")
        time.sleep(self.step)
        return pods

    def finish(self, pods: dict[str, dict], attempt: int, restarts: int = 0) -> None:
        for rid, pod in pods.items():
            self.log(pod, format_metric("epoch", epoch=2, epochs=2, loss=0.5) + f"\n{rid} attempt {attempt}: done\n",
                     done=True)
            self.terminated(pod, 0, restarts)
        time.sleep(self.step)


class JobSetScenario(_Scenario):
    """The JobSet controller: one Indexed Job per replicated job; a failed pod restarts the JobSet."""

    resource = "jobsets"

    def replicas(self) -> list[tuple[str, int]]:
        return [(rj["name"], i) for rj in self.obj["spec"]["replicatedJobs"]
                for i in range(rj["template"]["spec"]["completions"])]

    def pod(self, role: str, index: int, attempt: int) -> dict:
        js = self.name
        job = f"{js}-{role}-0"
        marks = {"jobset.sigs.k8s.io/jobset-name": js, "jobset.sigs.k8s.io/replicatedjob-name": role,
                 "jobset.sigs.k8s.io/job-index": "0", "jobset.sigs.k8s.io/restart-attempt": str(attempt),
                 "batch.kubernetes.io/job-completion-index": str(index), "batch.kubernetes.io/job-name": job}
        rjob = next(r for r in self.obj["spec"]["replicatedJobs"] if r["name"] == role)
        template = rjob["template"]["spec"]["template"]["spec"]
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{job}-{index}-{uuid.uuid4().hex[:5]}", "namespace": self.ns,
                             "labels": dict(marks), "annotations": dict(marks)},
                "spec": {"hostname": f"{job}-{index}", "subdomain": js, "restartPolicy": "Never",
                         "containers": [{k: v for k, v in c.items() if k in ("name", "image", "command", "args")}
                                        for c in template["containers"]]},
                "status": {"phase": "Pending"}}

    def set_status(self, **status) -> None:
        obj = self.fake.get("jobsets", self.ns, self.name)
        if obj is None:
            return
        obj["status"] = {"restarts": 0, **obj.get("status", {}), **status}
        self.fake.put("jobsets", obj)

    def play(self) -> None:
        self.set_status(restarts=0, replicatedJobsStatus=[
            {"name": r["name"], "ready": 0, "succeeded": 0, "failed": 0, "active": 1, "suspended": 0}
            for r in self.obj["spec"]["replicatedJobs"]])
        pods = self.start_attempt(0)
        attempt = 0
        if self.fail:
            pod = pods[self.fail]
            self.log(pod, f"{self.fail} attempt 0: killed\n", done=True)
            self.terminated(pod, self.exit_code)
            role = self.fail.rpartition("-")[0]
            _event(self.fake, self.ns, "Job", f"{self.name}-{role}-0", "BackoffLimitExceeded",
                   "Job has reached the specified backoff limit", warning=True, component="job-controller")
            time.sleep(self.step)
            if self.compact_on_restart:
                self.fake.compact()
            attempt = 1
            self.set_status(restarts=1, restartsCountTowardsMax=1)
            _event(self.fake, self.ns, "JobSet", self.name, "Restarting", "restarting jobset, attempt 1",
                   component="jobset-controller")
            for p in pods.values():
                self.fake.delete("pods", self.ns, p["metadata"]["name"])
            pods = self.start_attempt(1)
        if self.hold:
            self.fake.wait_for(lambda f: not self.alive(), timeout=60)
            return
        self.finish(pods, attempt)
        self.set_status(terminalState="Completed", conditions=[{
            "type": "Completed", "status": "True", "reason": "AllJobsCompleted",
            "message": "jobset completed successfully", "lastTransitionTime": now()}])
        _event(self.fake, self.ns, "JobSet", self.name, "AllJobsCompleted", "jobset completed successfully",
               component="jobset-controller")


class TFJobScenario(_Scenario):
    """The TFJob operator: one pod per replica, restarted in place (restartCount) under OnFailure."""

    resource = "tfjobs"

    def replicas(self) -> list[tuple[str, int]]:
        out = []
        for rtype, spec in self.obj["spec"]["tfReplicaSpecs"].items():
            role = "chief" if rtype in ("Chief", "Master") else rtype.lower()
            out += [(role, i) for i in range(spec.get("replicas", 1))]
        return out

    def pod(self, role: str, index: int, attempt: int) -> dict:
        labels = {"training.kubeflow.org/job-name": self.name, "training.kubeflow.org/operator-name": "tfjob-controller",
                  "training.kubeflow.org/replica-type": role, "training.kubeflow.org/replica-index": str(index)}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"{self.name}-{role}-{index}", "namespace": self.ns, "labels": labels},
                "spec": {"containers": [{"name": "tensorflow", "image": "gcr.io/p/t:v1"}], "restartPolicy": "OnFailure"},
                "status": {"phase": "Pending"}}

    def condition(self, kind: str, reason: str, message: str) -> None:
        obj = self.fake.get("tfjobs", self.ns, self.name)
        conds = [dict(c, status="False") for c in (obj.get("status") or {}).get("conditions", [])]
        conds.append({"type": kind, "status": "True", "reason": reason, "message": message,
                      "lastUpdateTime": now(), "lastTransitionTime": now()})
        obj["status"] = {"conditions": conds, "replicaStatuses": {}}
        self.fake.put("tfjobs", obj)

    def play(self) -> None:
        self.condition("Created", "TFJobCreated", f"TFJob {self.name} is created.")
        pods = self.start_attempt(0)
        self.condition("Running", "TFJobRunning", f"TFJob {self.ns}/{self.name} is running.")
        restarts = 0
        if self.fail:  # the container dies; the kubelet restarts it in the same pod
            pod = pods[self.fail]
            self.log(pod, f"{self.fail} attempt 0: killed\n")
            last = {"terminated": {"exitCode": self.exit_code, "reason": "Error", "startedAt": now(),
                                   "finishedAt": now()}}
            self.fake.write_log(self.ns, pod["metadata"]["name"], "", done=True)
            time.sleep(self.step)
            self.fake.logs.pop((self.ns, pod["metadata"]["name"]))
            restarts = 1
            pods[self.fail] = self.running(pod, restarts=1, last=last)
            self.log(pods[self.fail], f"{self.fail} attempt 1: starting\n")
            time.sleep(self.step)
        for rid, pod in pods.items():
            self.log(pod, format_metric("epoch", epoch=2, epochs=2, loss=0.5) + f"\n{rid}: done\n", done=True)
            self.terminated(pod, 0, restarts if rid == self.fail else 0)
        time.sleep(self.step)
        self.condition("Succeeded", "TFJobSucceeded", f"TFJob {self.ns}/{self.name} successfully completed.")
