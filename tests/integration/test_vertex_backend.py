"""The Vertex AI backend against a fake of Google's APIs over real HTTP (tests/fakes/vertex_api.py),
driven through the real CLI in subprocesses and the real clients (aiplatform REST transport,
google-cloud-storage), with the anonymous credentials the backend gives a plain-http emulator."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest
from fakes.vertex_api import FakeGoogle, canonical

from multiworker.job import Store
from multiworker.procs import free_ports
from multiworker.spec.formats.schema import check_schema

CONSOLE = "https://console.cloud.google.com/vertex-ai/locations/us-central1/training/{}?project=proj"
# the prebuilt TensorFlow images have ended (2.17's on 2026-07-11): a module job runs on an image
# `multiworker build --push` made
EXECUTOR = "us-docker.pkg.dev/proj/trainers/tf:2.21"
VERTEX = ["--backend", "vertex", "--project", "proj", "--region", "us-central1"]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    with FakeGoogle() as server:
        # google-auth must never reach for Google: no ADC file, no metadata server but loopback's port 9
        server.env_vars = {**server.env(), "GOOGLE_APPLICATION_CREDENTIALS": "", "HOME": str(tmp_path),
                           "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "MULTIWORKER_VERTEX_POLL_SECONDS": "0.1",
                           "NO_GCE_CHECK": "true", "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9"}
        yield server


def mw(*args, home: Path, fake: FakeGoogle, env: dict | None = None, timeout: float = 120):
    full = {**os.environ, "MULTIWORKER_HOME": str(home), **fake.env_vars, **(env or {})}
    return subprocess.run([sys.executable, "-m", "multiworker", *map(str, args)], capture_output=True, text=True,
                          env=full, timeout=timeout)


def container_spec(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent("""\
        name: census
        module: trainer.task
        args: [--epochs, "2"]
        output_dir: gs://bucket/census
        pools:
          chief:
            replicas: 1
            machine: {machine_type: n1-standard-8, accelerator_type: NVIDIA_TESLA_T4, accelerator_count: 1}
          worker: {replicas: 2, machine: {machine_type: n1-standard-8}}
          ps: {replicas: 1, machine: {machine_type: n1-highmem-4}}
          evaluator: {replicas: 1, machine: {machine_type: n1-standard-4, boot_disk_size_gb: 200}}
        run_policy: {restart_policy: ExitCode, active_deadline: 2h}
        """) + extra)
    return path


def package_spec(tmp_path: Path) -> Path:
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "task.py").write_text("from multiworker import trainer\nprint('training')\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(b"x" * 1000)
    path = tmp_path / "job.yaml"
    path.write_text("name: mnist\nmodule: trainer.task\nworking_dir: .\npools:\n  worker: {replicas: 3}\n")
    return path


def test_container_job_body_console_link_and_success(tmp_path, mw_home, fake):
    """chief + 2 workers + ps + evaluator from --image: the exact CustomJob Vertex receives."""
    fake.task_output = {"workerpool0-0": ["chief: epoch 1/2", "chief: done"], "workerpool1-1": ["worker-1 up"],
                        "workerpool3-0": ["evaluator: loss 0.5"]}
    image = "us-docker.pkg.dev/p/r/trainer:v1"
    proc = mw("run", container_spec(tmp_path), *VERTEX, "--image", image, home=mw_home, fake=fake)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    machine = {"machineType": "n1-standard-8"}
    container = {"imageUri": image, "command": ["python", "-m", "trainer.task"], "args": ["--epochs", "2"]}
    assert canonical(fake.created[0]) == {
        "displayName": "census",
        "labels": {"multiworker-job": Store(mw_home).list_jobs()[0].id},
        "jobSpec": {
            "workerPoolSpecs": [
                {"machineSpec": {**machine, "acceleratorType": "NVIDIA_TESLA_T4", "acceleratorCount": 1},
                 "replicaCount": 1, "containerSpec": container},
                {"machineSpec": machine, "replicaCount": 2, "containerSpec": container},
                {"machineSpec": {"machineType": "n1-highmem-4"}, "replicaCount": 1, "containerSpec": container},
                {"machineSpec": {"machineType": "n1-standard-4"}, "replicaCount": 1, "containerSpec": container,
                 "diskSpec": {"bootDiskSizeGb": 200}},
            ],
            "baseOutputDirectory": {"outputUriPrefix": "gs://bucket/census"},
            "scheduling": {"timeout": "7200s", "restartJobOnWorkerRestart": True},
        },
    }
    check_schema(fake.created[0], "vertex", source="received")
    assert not any(fake.buckets.values()), "a container job uploads nothing"
    store = Store(mw_home)
    job = store.list_jobs()[0]
    number = job.handle["resource_name"].rsplit("/", 1)[-1]
    assert CONSOLE.format(number) in proc.stdout
    assert job.state == "Succeeded" and job.output_dir == "gs://bucket/census"
    assert {f"{r['role']}-{r['idx']}": r["state"] for r in store.replicas(job.id)} == {
        "chief-0": "Succeeded", "worker-0": "Succeeded", "worker-1": "Succeeded", "ps-0": "Succeeded",
        "evaluator-0": "Succeeded"}
    logs = mw("logs", job.id, home=mw_home, fake=fake)
    assert "[chief-0] chief: epoch 1/2" in logs.stdout and "[chief-0] chief: done" in logs.stdout
    assert "[worker-1] worker-1 up" in logs.stdout and "[evaluator-0] evaluator: loss 0.5" in logs.stdout
    assert "Waiting for job to be provisioned." in (Path(job.job_dir) / "supervisor.log").read_text()


def test_package_job_uploads_sdists_and_runs_them(tmp_path, mw_home, fake):
    """A module job without a container: its working directory (no pyproject: one is generated) and
    multiworker's replica runtime (the trainer imports it) arrive in the bucket as sdists."""
    fake.task_output = {"workerpool0-0": ["training on worker 0"], "workerpool1-1": ["training on worker 2"]}
    job = package_spec(tmp_path)
    refused = mw("run", job, *VERTEX, "--staging-bucket", "gs://bucket", home=mw_home, fake=fake)
    assert refused.returncode == 2 and "tf-cpu.2-17.py310:latest is Vertex AI's prebuilt TensorFlow 2.17 image, " \
        "no longer usable since 2026-07-11" in refused.stderr and "multiworker build" in refused.stderr, refused.stderr
    assert fake.created == [] and not fake.buckets["bucket"]
    proc = mw("run", job, *VERTEX, "--staging-bucket", "gs://bucket", "--executor-image", EXECUTOR,
              home=mw_home, fake=fake)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "worker 0 becomes Vertex AI's chief" in proc.stdout
    job = Store(mw_home).list_jobs()[0]
    objects = sorted(fake.buckets["bucket"])
    prefix = f"multiworker/{job.id}/packages/"
    # setuptools >= 69.3 spells the sdist mnist_trainer (PEP 625), older ones mnist-trainer
    trainer_sdist = objects[0].removeprefix(prefix).removesuffix(".tar.gz")
    assert trainer_sdist in ("mnist-trainer-0.0.0", "mnist_trainer-0.0.0"), objects
    assert objects == [f"{prefix}{trainer_sdist}.tar.gz", f"{prefix}multiworker-0.1.0.tar.gz"]
    with tarfile.open(fileobj=io.BytesIO(fake.buckets["bucket"][objects[0]])) as tar:
        names = tar.getnames()
    assert f"{trainer_sdist}/trainer/task.py" in names and not any("big.bin" in n for n in names)
    with tarfile.open(fileobj=io.BytesIO(fake.buckets["bucket"][objects[1]])) as tar:
        assert "multiworker-0.1.0/multiworker/trainer/__init__.py" in tar.getnames()
    uris = [f"gs://bucket/{o}" for o in objects]
    package = {"executorImageUri": EXECUTOR, "packageUris": uris, "pythonModule": "trainer.task"}
    machine = {"machineType": "n1-standard-4"}
    assert canonical(fake.created[0])["jobSpec"] == {
        "workerPoolSpecs": [{"machineSpec": machine, "replicaCount": 1, "pythonPackageSpec": package},
                            {"machineSpec": machine, "replicaCount": 2, "pythonPackageSpec": package}],
        "baseOutputDirectory": {"outputUriPrefix": f"gs://bucket/multiworker/{job.id}/output"},
        "scheduling": {"restartJobOnWorkerRestart": True},
    }
    check_schema(fake.created[0], "vertex", source="received")
    logs = mw("logs", job.id, home=mw_home, fake=fake)
    # without a chief, pool 0 is worker 0 and pool 1 holds workers 1 and 2
    assert "[worker-0] training on worker 0" in logs.stdout and "[worker-2] training on worker 2" in logs.stdout


def test_failed_job_surfaces_the_error(tmp_path, mw_home, fake):
    fake.script = ["JOB_STATE_RUNNING", "JOB_STATE_FAILED"]
    proc = mw("run", container_spec(tmp_path), *VERTEX, "--image", "img:1", home=mw_home, fake=fake)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    job = Store(mw_home).list_jobs()[0]
    assert job.state == "Failed" and job.message == fake.failure_message
    assert fake.failure_message in proc.stdout
    status = json.loads(mw("status", job.id, "--json", home=mw_home, fake=fake).stdout)
    assert status["state"] == "Failed"


def test_detached_job_follows_and_cancels(tmp_path, mw_home, fake):
    fake.script = ["JOB_STATE_RUNNING"]  # then it runs until cancelled
    fake.task_output = {"workerpool0-0": ["step 1"]}
    proc = mw("run", container_spec(tmp_path), *VERTEX, "--image", "img:1", "--detach", home=mw_home, fake=fake)
    assert proc.returncode == 0, proc.stderr
    job_id = proc.stdout.strip()
    store = Store(mw_home)
    deadline = time.monotonic() + 60
    while not (store.get_job(job_id).state == "Running" and
               any(r["state"] == "Running" for r in store.replicas(job_id))):
        assert time.monotonic() < deadline, store.events(job_id)
        time.sleep(0.1)
    assert {r["role"]: r["state"] for r in store.replicas(job_id)}["chief"] == "Running"
    assert {r["role"]: r["state"] for r in store.replicas(job_id)}["ps"] == "Pending"  # no logs from it yet
    pid = store.get_job(job_id).supervisor_pid
    cancel = mw("cancel", job_id, home=mw_home, fake=fake)
    assert cancel.returncode == 0, cancel.stdout + cancel.stderr
    name = store.get_job(job_id).handle["resource_name"]
    assert fake.cancels == [name] or fake.cancels[0] == name
    assert store.get_job(job_id).state == "Cancelled"
    deadline = time.monotonic() + 30
    while _alive(pid):  # the detached driver sees CANCELLED and exits
        assert time.monotonic() < deadline, "the detached driver outlived its cancelled job"
        time.sleep(0.1)
    assert "[chief-0] step 1" in mw("logs", job_id, home=mw_home, fake=fake).stdout


def _alive(pid: int) -> bool:
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)
        if waited:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


@pytest.mark.parametrize(
    "case, expect",
    [
        ("no-credentials", "no Google Cloud credentials found; run `gcloud auth application-default login`"),
        ("no-credentials-detached", "no Google Cloud credentials found; run `gcloud auth application-default login`"),
        ("unknown-project", "--project nope: creating the CustomJob was refused"),
        ("missing-bucket", "--staging-bucket gs://missing: the bucket does not exist; create it with"),
        ("quota", "quota exceeded"),
        ("local-output", "output_dir: ./out is a local path; Vertex AI needs gs://BUCKET/PATH"),
    ],
    ids=lambda v: v if v in ("no-credentials", "no-credentials-detached", "unknown-project", "missing-bucket", "quota", "local-output") else "",
)
def test_setup_errors_are_one_line_and_leave_nothing_behind(tmp_path, mw_home, fake, case, expect):
    args = ["run", package_spec(tmp_path), "--backend", "vertex", "--project", "proj", "--executor-image", EXECUTOR,
            "--staging-bucket", "gs://bucket"]
    env = {}
    if case.startswith("no-credentials"):  # no emulator: the user's ADC are looked for, and there are none
        args += ["--detach"] if case.endswith("detached") else []  # refused before a job is recorded
        env = {"MULTIWORKER_VERTEX_ENDPOINT": "", "MULTIWORKER_GCS_ENDPOINT": "", "MULTIWORKER_LOGGING_ENDPOINT": ""}
    elif case == "unknown-project":  # refused at creation: a container job, nothing to upload
        args = ["run", container_spec(tmp_path), "--backend", "vertex", "--project", "nope", "--image", "img:1"]
    elif case == "missing-bucket":
        args[-1] = "gs://missing"
    elif case == "quota":
        fake.create_error = (429, "RESOURCE_EXHAUSTED", "Quota exceeded for aiplatform.googleapis.com/custom_model_training_cpus")
    elif case == "local-output":
        (tmp_path / "job.yaml").write_text((tmp_path / "job.yaml").read_text() + "output_dir: ./out\n")
    proc = mw(*args, home=mw_home, fake=fake, env=env)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expect in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert fake.created == [] and not fake.buckets["bucket"]
    if case.startswith("no-credentials"):
        assert Store(mw_home).list_jobs() == []
    if case == "quota":  # the packages were uploaded, then deleted, and the error says so
        assert "(deleted the uploaded gs://bucket/multiworker/" in lines[0]
        assert any(method == "DELETE" for method, _ in fake.requests)


@pytest.mark.parametrize("detach", [False, True], ids=["foreground", "detached"])
def test_an_unreachable_google_cloud_is_one_line_naming_the_cause(tmp_path, mw_home, fake, detach):
    """No network: one line naming the endpoint, the cause and the fix, at once (not after two
    minutes of retries and their warnings), and no job id from --detach."""
    port = free_ports(1)[0]  # nothing listens there
    env = {"MULTIWORKER_VERTEX_ENDPOINT": f"http://127.0.0.1:{port}", "MULTIWORKER_GCS_ENDPOINT": f"http://127.0.0.1:{port}"}
    args = ["run", package_spec(tmp_path), *VERTEX, "--staging-bucket", "gs://bucket", "--executor-image", EXECUTOR,
            *(["--detach"] if detach else [])]
    proc = mw(*args, home=mw_home, fake=fake, env=env)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert len(lines) == 1 and f"cannot reach Vertex AI at 127.0.0.1:{port} (Connection refused)" in lines[0], lines
    assert "check the network connection" in lines[0] and "urllib3" not in proc.stderr
    assert Store(mw_home).list_jobs() == []


# each replica's output, the same for a Vertex task and a local process: a plain line, two epochs
METRIC_LINES = {
    "worker-0": ["starting worker-0",
                 'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 1, "epochs": 2, "loss": 0.9, "accuracy": 0.5}',
                 'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 2, "epochs": 2, "loss": 0.6, "accuracy": 0.75}'],
    "worker-1": ["starting worker-1",
                 'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 1, "epochs": 2, "loss": 0.95, "accuracy": 0.45}',
                 'MULTIWORKER_METRIC {"kind": "epoch", "epoch": 2, "epochs": 2, "loss": 0.65, "accuracy": 0.7}'],
}


def _metric_views(home: Path, fake: FakeGoogle, job_id: str, tmp_path: Path) -> dict:
    """What a user sees of a job's metrics: `status --json`, `plot --json` (the series and the lines
    drawn into the png) and the dashboard's series."""
    from multiworker.ui.views import Views

    status = json.loads(mw("status", job_id, "--json", home=home, fake=fake).stdout)
    png = tmp_path / f"{job_id}.png"
    plot = mw("plot", job_id, "-o", png, "--json", home=home, fake=fake)
    assert plot.returncode == 0, plot.stdout + plot.stderr
    plotted = json.loads(plot.stdout)
    assert png.stat().st_size > 0
    return {
        "state": status["state"],
        "last_metrics": status["last_metrics"],
        "epoch": (status["epoch"], status["epochs"]),
        "replicas": {r["name"]: r["last_metrics"] for r in status["replicas"]},
        "plot_series": plotted["series"]["epoch_metrics"],
        "plot_drawn": {title: lines for title, lines in plotted["drawn"].items() if "epoch" in title},
        "dashboard": Views(home).series(job_id)["epoch_metrics"],
    }


def test_vertex_metric_lines_reach_the_store_as_a_local_jobs_do(tmp_path, mw_home, fake):
    """A Vertex task's MULTIWORKER_METRIC lines (read from Cloud Logging) are metrics: status, plot and
    the dashboard show the same as for a local job whose replicas print the same lines (before the
    journal, Vertex lines only reached the console and its jobs had no metrics at all)."""
    fake.task_output = {"workerpool0-0": METRIC_LINES["worker-0"], "workerpool1-0": METRIC_LINES["worker-1"]}
    spec = tmp_path / "vertex.yaml"
    spec.write_text("name: metrics\ncommand: [python, prog.py]\noutput_dir: gs://bucket/metrics\n"
                    "pools: {worker: {replicas: 2}}\n")
    proc = mw("run", spec, *VERTEX, "--image", "img:1", home=mw_home, fake=fake)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    vertex_id = Store(mw_home).list_jobs()[0].id

    (tmp_path / "prog.py").write_text(
        f"import os\nfor line in {METRIC_LINES!r}[os.environ['MULTIWORKER_REPLICA']]:\n    print(line, flush=True)\n")
    spec = tmp_path / "local.yaml"
    spec.write_text(f"name: metrics\ncommand: [{sys.executable}, prog.py]\nworking_dir: {tmp_path}\n"
                    f"output_dir: {tmp_path / 'out'}\npools: {{worker: {{replicas: 2}}}}\n")
    proc = mw("run", spec, home=mw_home, fake=fake)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    local_id = next(j.id for j in Store(mw_home).list_jobs() if j.id != vertex_id)

    vertex = _metric_views(mw_home, fake, vertex_id, tmp_path)
    epoch2 = {"kind": "epoch", "epoch": 2, "epochs": 2, "loss": 0.6, "accuracy": 0.75}
    assert vertex["state"] == "Succeeded" and vertex["last_metrics"] == epoch2 and vertex["epoch"] == (2, 2)
    assert vertex["replicas"] == {"worker-0": epoch2,
                                  "worker-1": {**epoch2, "loss": 0.65, "accuracy": 0.7}}
    assert vertex["plot_series"] == {"accuracy": {"worker-0": [[1, 0.5], [2, 0.75]], "worker-1": [[1, 0.45], [2, 0.7]]},
                                     "loss": {"worker-0": [[1, 0.9], [2, 0.6]], "worker-1": [[1, 0.95], [2, 0.65]]}}
    assert vertex["plot_drawn"]["Loss per epoch"]["loss (worker-1)"] == [[1.0, 0.95], [2.0, 0.65]]
    assert vertex["dashboard"] == vertex["plot_series"]
    assert vertex == _metric_views(mw_home, fake, local_id, tmp_path)
    # the metric lines are metrics, not console output; the plain line is both logged and printed
    logs = mw("logs", vertex_id, home=mw_home, fake=fake).stdout
    assert "[worker-1] starting worker-1" in logs
