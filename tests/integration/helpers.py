"""Helpers for tests that run the real launcher as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from multiworker.job import Store
from multiworker.procs import free_ports, processes_of_job

PROGRAMS = Path(__file__).resolve().parents[1] / "fixtures" / "programs"
REPO = Path(__file__).resolve().parents[2]


def mw(*args: str, home: Path, check: bool = False, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """Run ``multiworker ARGS`` to completion with MULTIWORKER_HOME=home."""
    env = {**os.environ, "MULTIWORKER_HOME": str(home), **kw.pop("env", {})}
    return subprocess.run([sys.executable, "-m", "multiworker", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=check, **kw)


def mw_popen(*args: str, home: Path) -> subprocess.Popen:
    env = {**os.environ, "MULTIWORKER_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "multiworker", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)


def two_workers(script: Path, *args: str, env: dict | None = None, timeout: float = 240) -> list[dict]:
    """Run ``script ARGS`` as two MultiWorkerMirroredStrategy workers on localhost (TF_CONFIG set
    by hand, no launcher); each must exit 0 and print a JSON line last, returned in index order."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(2)]}
    procs = []
    for index in range(2):
        worker_env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=str(REPO / "src"), **(env or {}),
                          TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        procs.append(subprocess.Popen([sys.executable, str(script), *args], env=worker_env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True))
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            p.kill()
    for p, (_, err) in zip(procs, outs):
        assert p.returncode == 0, err[-3000:]
    return [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]


def status(home: Path, job: str = "last") -> dict:
    proc = mw("status", job, "--json", home=home)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def fake_spec(tmp_path: Path, pools: str, run_policy: str = "{backoff: 0.1}", name: str = "fake") -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(f"name: {name}\nmodule: fakejob\nworking_dir: {PROGRAMS}\npools: {pools}\nrun_policy: {run_policy}\n")
    return path


def wait_for(predicate, timeout: float = 60.0, interval: float = 0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def running_job(home: Path) -> dict:
    """The single job in ``home`` once all its replicas run."""
    def ready():
        store = Store(home)
        jobs = store.list_jobs()
        if jobs and jobs[0].state == "Running":
            reps = store.replicas(jobs[0].id)
            if reps and all(r["state"] == "Running" for r in reps):
                return jobs[0]
        return None

    return wait_for(ready)


def no_processes_left(job_id: str, timeout: float = 60.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not processes_of_job(job_id):
            return True
        time.sleep(0.1)
    return not processes_of_job(job_id)


def check_tf_config(records: dict[str, dict], expected_cluster: dict[str, int], chief_type: str = "chief") -> None:
    """Same cluster everywhere, sized as expected; each replica's task is its own address; ports differ."""
    clusters = [r["tf_config"]["cluster"] for r in records.values()]
    assert all(c == clusters[0] for c in clusters)
    cluster = clusters[0]
    assert {k: len(v) for k, v in cluster.items()} == expected_cluster
    addresses = [a for hosts in cluster.values() for a in hosts]
    assert len(set(addresses)) == len(addresses)
    assert all(a.startswith("127.0.0.1:") and int(a.rsplit(":", 1)[1]) > 0 for a in addresses)
    for name, record in records.items():
        role, index = name.rsplit("-", 1)
        task = record["tf_config"]["task"]
        assert task == {"type": chief_type if role == "chief" else role, "index": int(index)}
        assert cluster[task["type"]][task["index"]] in addresses


def epochs_by_attempt(home: Path, job_id: str, replica: str = "worker-0") -> tuple[list[int], list[int]]:
    """The epochs ``replica`` reported in attempt 0 and in attempt 1 (a resumed run)."""
    epochs = [(m["attempt"], m["data"]["epoch"]) for m in Store(home).metrics(job_id, "epoch")
              if m["replica"] == replica]
    return [e for a, e in epochs if a == 0], [e for a, e in epochs if a == 1]


def assert_resumed(home: Path, doc: dict, epochs: int) -> tuple[list[int], list[int]]:
    """Attempt 1 of a job killed once resumed after the last epoch attempt 0 backed up, and ran the rest.

    Its first epoch (``first_epoch`` in the trainer's metrics.json) follows attempt 0's last recorded
    epoch, or the one after it: a group stopped after an epoch's backup but before its metric line
    (the epoch's checkpoint is saved between them, and it needs every worker) resumes past an epoch
    it never reported. Never from scratch, never skipping an epoch. Returns the epochs by attempt."""
    before, after = epochs_by_attempt(home, doc["id"])
    first = json.loads((Path(doc["output_dir"]) / "metrics.json").read_text())["first_epoch"]
    assert before and max(before) + 1 <= first <= max(before) + 2, (before, after, first)
    assert after == list(range(first, epochs + 1)), (before, after, first)
    return before, after
