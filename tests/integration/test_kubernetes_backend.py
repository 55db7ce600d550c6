"""The Kubernetes backend against a fake API server over real HTTP, through the real ``kubernetes`` client:
create, watch with resourceVersion and a 410 relist, pod logs followed per attempt, delete, auth failure."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("kubernetes", reason="the kubernetes client is not installed (pip install 'multiworker[kubernetes]')")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fakes.kube_api import FakeKube  # noqa: E402
from fakes.kube_cluster import NODE, JobSetScenario, TFJobScenario  # noqa: E402

from multiworker.backends.base import get_backend  # noqa: E402
from multiworker.errors import SpecError, UserError  # noqa: E402
from multiworker.job import JobState, Store  # noqa: E402
from multiworker.jobs import create_job  # noqa: E402
from multiworker.spec.formats import LoadOptions, load_job  # noqa: E402
from multiworker.spec.formats.schema import check_schema  # noqa: E402

SPEC = """
name: mnist
image: gcr.io/p/t:v1
module: trainer.task
args: [--epochs, "2"]
output_dir: gs://b/out
pools: {worker: {replicas: 2}}
run_policy: {restart_policy: OnFailure, backoff_limit: 2}
"""


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeKube() as server:
        monkeypatch.setenv("KUBECONFIG", str(server.kubeconfig(tmp_path / "kubeconfig", namespace="ml")))
        yield server


def make_job(tmp_path: Path, text: str = SPEC, **options) -> tuple[Store, str]:
    path = tmp_path / "job.yaml"
    path.write_text(text)
    store = Store()
    job_id = create_job(store, load_job(path, LoadOptions(check=False)), backend="kubernetes",
                        backend_options={"watch_timeout": 5, **options})
    return store, job_id


def reasons(store: Store, job_id: str) -> list[str]:
    return [e["reason"] for e in store.events(job_id)]


def test_jobset_pod_fails_once_restarts_and_succeeds(fake, tmp_path):
    """A worker dies by a signal; the JobSet restarts; the watch meets a 410 and relists; logs of both attempts kept."""
    scenario = JobSetScenario(fake, fail="worker-1", compact_on_restart=True)
    scenario.start()
    store, job_id = make_job(tmp_path)
    state = get_backend("kubernetes").run(store, job_id)
    assert scenario.error is None
    assert state is JobState.SUCCEEDED
    job = store.get_job(job_id)
    assert (job.state, job.restarts) == ("Succeeded", 1)
    handle = job.handle
    assert handle == {"api": "jobset", "namespace": "ml", "name": f"mnist-{job_id[:6]}", "context": "fake",
                      "server": fake.url}
    created = fake.get("jobsets", "ml", handle["name"])
    check_schema({k: v for k, v in created.items() if k != "status"} | {"metadata": {"name": handle["name"]}},
                 "jobset", source="created")
    assert [(r["role"], r["idx"], r["state"], r["exit_code"], r["attempt"], r["node"]) for r in store.replicas(job_id)] == [
        ("worker", 0, "Succeeded", 0, 1, NODE), ("worker", 1, "Succeeded", 0, 1, NODE)]
    assert [(a["n"], a["outcome"]) for a in store.attempts(job_id)] == [(0, "Restarting"), (1, "Succeeded")]
    logs = Path(job.job_dir)
    first, second = (logs / "attempt_0" / "worker-1.log").read_text(), (logs / "attempt_1" / "worker-1.log").read_text()
    assert "worker-1 attempt 0: step 1" in first and "attempt 0: killed" in first  # written while followed
    assert "worker-1 attempt 1: starting" in second and "worker-1 attempt 1: done" in second
    assert "attempt 1" not in first
    assert all(q.get("follow") == "true" for q in fake.calls("GET", "/log"))
    epochs = [(m["attempt"], m["replica"], m["epoch"]) for m in store.metrics(job_id, "epoch")]
    assert (1, "worker-0", 2) in epochs and (0, "worker-1", 1) in epochs
    got = reasons(store, job_id)
    for reason in ("Submitted", "Scheduled", "Started", "ExitedWithCode", "BackoffLimitExceeded", "Restarting",
                   "AllJobsCompleted", "Succeeded"):
        assert reason in got, (reason, got)
    exits = [e for e in store.events(job_id) if e["reason"] == "ExitedWithCode" and e["replica"] == "worker-1"]
    assert exits[0]["type"] == "Warning" and "code 137" in exits[0]["message"]
    # the watch resumed from its resourceVersion, met 410 Gone after the compaction, and listed again
    assert fake.gone_sent >= 1
    pod_lists = [q for q in fake.calls("GET", "/namespaces/ml/pods") if "watch" not in q]
    assert len(pod_lists) >= 3  # first list, the relist after 410, the final view
    assert all(q.get("resourceVersion") for q in fake.calls("GET", "/namespaces/ml/pods") if "watch" in q)


def test_cancel_deletes_the_jobset_and_its_pods(fake, tmp_path):
    scenario = JobSetScenario(fake, hold=True)
    scenario.start()
    store, job_id = make_job(tmp_path, namespace="team-a")
    result: dict = {}
    runner = threading.Thread(target=lambda: result.update(state=get_backend("kubernetes").run(Store(), job_id)))
    runner.start()
    fake.wait_for(lambda f: len([p for p in f.items("pods", "team-a") if p["status"]["phase"] == "Running"]) == 2)
    fake.wait_for(lambda f: store.get_job(job_id).state == "Running")
    job = get_backend("kubernetes").cancel(store, store.get_job(job_id))
    runner.join(30)
    assert not runner.is_alive()
    assert job.state == "Cancelled" and result["state"] is JobState.CANCELLED
    deletes = fake.calls("DELETE", "/jobsets/")
    assert deletes and deletes[0].get("propagationPolicy") == "Foreground"
    assert fake.items("jobsets", "team-a") == [] and fake.items("pods", "team-a") == []
    assert "Cancelled" in reasons(store, job_id)
    assert {r["state"] for r in store.replicas(job_id)} <= {"Stopped", "Succeeded", "Failed"}


def test_tfjob_container_restart_in_place(fake, tmp_path):
    scenario = TFJobScenario(fake, fail="worker-0")
    scenario.start()
    store, job_id = make_job(tmp_path, kubernetes_api="tfjob")
    assert get_backend("kubernetes").run(store, job_id) is JobState.SUCCEEDED
    assert scenario.error is None
    job = store.get_job(job_id)
    assert job.restarts == 1
    assert fake.get("tfjobs", "ml", f"mnist-{job_id[:6]}")["kind"] == "TFJob"
    logs = Path(job.job_dir)
    assert "attempt 0: killed" in (logs / "attempt_0" / "worker-0.log").read_text()
    assert "worker-0: done" in (logs / "attempt_1" / "worker-0.log").read_text()
    assert {r["state"] for r in store.replicas(job_id)} == {"Succeeded"}


def test_auth_failure_is_one_line_naming_the_cluster(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "bad", token="expired")))
    store, job_id = make_job(tmp_path)
    with pytest.raises(UserError) as info:
        get_backend("kubernetes").run(store, job_id)
    message = str(info.value)
    assert "\n" not in message
    assert f"context fake ({fake.url})" in message and "401" in message and "get-credentials" in message
    assert fake.items("jobsets", "ml") == []
    job = store.get_job(job_id)  # recorded as ended, not left Pending
    assert job.state == "Failed" and job.message == message and "SubmitFailed" in reasons(store, job_id)


def test_missing_crd_names_the_install_line(fake, tmp_path):
    fake.crds = {"tfjobs"}  # a cluster without the JobSet controller
    store, job_id = make_job(tmp_path)
    with pytest.raises(UserError, match=r"create JobSet ml/mnist-\w+: 404 .*not installed there; install it: kubectl "
                                        r"apply --server-side -f .*jobset/releases/download/v0\.12\.0/manifests\.yaml"):
        get_backend("kubernetes").run(store, job_id)
    assert store.get_job(job_id).state == "Failed"


def test_no_kubeconfig_fails_the_job_with_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    store, job_id = make_job(tmp_path)
    with pytest.raises(UserError, match="no kubeconfig"):
        get_backend("kubernetes").run(store, job_id)
    assert store.get_job(job_id).state == "Failed"


def test_check_refuses_before_anything_is_created(fake, tmp_path):
    backend = get_backend("kubernetes")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.csv").write_text("x\n")
    cases = [
        (SPEC.replace("image: gcr.io/p/t:v1\n", ""), {}, "image: pool worker .* has no container image"),
        (SPEC.replace("gs://b/out", "out"), {}, "output_dir: out is a local path the pods cannot see"),
        (SPEC.replace('[--epochs, "2"]', "[--data=data/train.csv]"), {}, r"pools\.worker\.args\[0\]: data/train.csv"),
    ]
    for text, options, match in cases:
        path = tmp_path / "job.yaml"
        path.write_text(text)
        with pytest.raises(SpecError, match=match):
            backend.check(load_job(path, LoadOptions(check=False)), backend.options(options))
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    assert backend.check(load_job(path, LoadOptions(check=False)), backend.options({})) == []
    assert fake.calls("POST", "/") == []


# -- through the CLI, as a user runs it ------------------------------------------------------------

def mw(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "multiworker", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_run_status_logs_on_kubernetes(fake, tmp_path):
    scenario = JobSetScenario(fake, fail="worker-0")
    scenario.start()
    path = tmp_path / "job.yaml"
    path.write_text(SPEC.replace("image: gcr.io/p/t:v1\n", ""))
    proc = mw("run", str(path), "--backend", "kubernetes", "--image", "gcr.io/p/t:v1", "--namespace", "ml",
              "--context", "fake", "-q", "--", "--lr", "0.1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    job_id = Store().resolve("last")
    created = fake.get("jobsets", "ml", f"mnist-{job_id[:6]}")
    container = created["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "gcr.io/p/t:v1" and container["args"] == ["--epochs", "2", "--lr", "0.1"]
    status = json.loads(mw("status", job_id, "--json").stdout)
    assert status["state"] == "Succeeded" and status["restarts"] == 1
    logs = mw("logs", job_id, "--replica", "worker-0", "--attempt", "0")
    assert "worker-0 attempt 0: killed" in logs.stdout
    assert "worker-0 attempt 1: done" in mw("logs", job_id, "--replica", "worker-0").stdout


def test_cli_detached_run_keeps_syncing_and_cancel_deletes(fake, tmp_path):
    JobSetScenario(fake, hold=True).start()
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    proc = mw("run", str(path), "--backend", "kubernetes", "--detach")
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    fake.wait_for(lambda f: Store().get_job(job_id).state == "Running", timeout=300)
    proc = mw("cancel", job_id)
    assert proc.returncode == 0, proc.stderr
    assert fake.items("jobsets", "ml") == [] and fake.items("pods", "ml") == []
    fake.wait_for(lambda f: not __import__("multiworker.procs", fromlist=["x"]).pid_alive(
        Store().get_job(job_id).supervisor_pid), timeout=60)  # the detached driver ended by itself
    assert Store().get_job(job_id).state == "Cancelled"


def test_cli_auth_failure_exit_2_one_line(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(fake.kubeconfig(tmp_path / "bad", token="expired")))
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    proc = mw("run", str(path), "--backend", "kubernetes")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("error: kubernetes context fake") and "401" in proc.stderr


def test_cli_refuses_local_only_options(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(SPEC)
    for extra, match in ((["--image", "gcr.io/p/t:v1=python x.py"], "not IMAGE=COMMAND"),
                         (["--inject-failure", "worker-1@5s"], "kill a pod there")):
        proc = mw("run", str(path), "--backend", "kubernetes", *extra)
        assert proc.returncode == 2 and match in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
