"""Reliability soak: N injected faults across roles and kinds in real MNIST jobs, several faults a
job, on the local backend and on Ray across a two-host cluster (two network namespaces,
tests/integration/ray_netns.py).

Each job carries ``--faults-per-job`` K flags ``--inject-failure ROLE-INDEX@step:S:KIND`` (each
fires once), at evenly spaced steps between 15% and 85% of its training. Jobs alternate between
two specs: ``all`` (chief 1, worker 2, ps 1, evaluator 1: ParameterServerStrategy; one worker on
the Ray cluster, whose hosts have 2 CPUs each), whose faults take ``--roles`` in turn, and ``mwms``
(two workers, MultiWorkerMirroredStrategy), whose faults hit worker-1 and worker-0 in turn. Kinds go
in turn per round of roles, so every role meets every kind. A kind is whatever follows the step in
the injection syntax (KILL, TERM, STOP, PREEMPT=10s), so new kinds need no change here. A faulted
job gets a restart budget of 2K+2 (``run_policy.backoff_limit``, back-off 0.1 s) and
``run_policy.hang_timeout`` (``--hang-timeout``, 30s), so a STOP with no CONT is found as a hang.

The trainer runs the example's own recipe (two passes over the data) cut into 8 epochs of a quarter
pass each (``TRAINER``) unless trainer args follow ``--``: trained to convergence, so a clean run's
own spread is below the tolerance, with faults at least an epoch apart (``--faults-per-job`` 5 or
fewer), so that each attempt trains a while between them. The per-job JSON has each fault's firing time and ``moments``, how many separate moments
they fired at. First ``--clean-runs`` clean runs of each spec and backend (their spread is
reported); their mean is the reference. After each job it checks: the job Succeeded; every injection's event says it was sent
(``InjectedFailure ... sent``, or ``Preempted``); its final test accuracy is within ``--tolerance``
points of the reference; no process of the job is left (on either host), no network namespace
``mw-<job>``, no container labelled with the job, and no job record left Running in the store.
Prints one JSON line a fault and a job to stderr as it goes, then a JSON report and a markdown
table (the BENCHMARKS.md row).

Usage: python bench/soak.py [--faults 10] [--faults-per-job 1] [--backend local ray]
                            [--roles chief worker ps evaluator] [--kinds KILL TERM STOP PREEMPT=10s]
                            [--hang-timeout 30s] [--clean-runs 2] [--tolerance 0.5] [-- trainer args]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _runs import REPO, split_args

sys.path.insert(0, str(REPO / "src"))
sys.path.insert(0, str(REPO / "tests" / "integration"))

from multiworker.faults import parse_injection  # noqa: E402
from multiworker.job import Store  # noqa: E402
from multiworker.netns import netns_name  # noqa: E402
from multiworker.procs import job_processes  # noqa: E402

JOB = REPO / "examples" / "mnist" / "job.yaml"
#: the example's own recipe (two passes over the data, its one-cycle schedule over them, backups
#: about every 2 s), trained to convergence so that a clean run's own spread is below the tolerance,
#: cut into 8 epochs of a quarter pass each, so that five faults sit an epoch apart. Global batch:
#: 128 (mwms: 64 a worker), 64 (all: ParameterServerStrategy's coordinator batch).
TRAINER = {"mwms": ["--epochs", "8", "--steps-per-epoch", "118"],
           "all": ["--epochs", "8", "--steps-per-epoch", "235"]}
ALL_ROLES = ("pools.chief.replicas=1", "pools.worker.replicas=2", "pools.ps.replicas=1",
             "pools.evaluator.replicas=1")
SPECS = ("all", "mwms")
FIRST, LAST = 0.15, 0.85  # the share of training over which a job's faults are spread
TIMEOUT = 600  # a job's limit, plus 300 s a fault


def plan(faults: int, per_job: int, roles: list[str], kinds: list[str], all_workers: int = 2) -> list[dict]:
    """The jobs, each with up to ``per_job`` faults. Jobs alternate between the ``all`` spec
    (chief, workers, ps, evaluator), whose faults take the roles in turn, and the ``mwms`` spec (two
    workers), whose faults hit worker-1 and worker-0 in turn (only ``all`` without worker in
    ``roles``, only ``mwms`` with worker alone). Kinds go in turn per round of roles, so every
    role meets every kind; a job's faults sit at evenly spaced shares of its training steps
    (``at``, between 15% and 85%), shifted a little from job to job."""
    specs = [s for s in SPECS if s != "mwms" or "worker" in roles]
    specs = specs if any(r != "worker" for r in roles) else ["mwms"]
    jobs: list[dict] = []
    turn = {"all": 0, "mwms": 0}
    n = 0
    while n < faults:
        j = len(jobs)
        spec = specs[j % len(specs)]
        k = min(per_job, faults - n)
        shift = ((j * 3) % 5) / 5
        job_faults = []
        for i in range(k):
            t = turn[spec]
            turn[spec] += 1
            if spec == "all":
                role, index = roles[t % len(roles)], 0
                kind = kinds[(t + t // len(roles)) % len(kinds)]
                if role == "worker":
                    index = (t // len(roles)) % all_workers
            else:
                role, index = "worker", 1 - (t // len(kinds)) % 2  # worker-1 first: the chief's peer
                kind = kinds[t % len(kinds)]
            at = FIRST + (LAST - FIRST) * (i + shift) / k if k > 1 else 0.3 + 0.4 * ((j * 7) % 10) / 10
            n += 1
            job_faults.append({"n": n, "role": role, "target": f"{role}-{index}", "kind": kind, "at": round(at, 3)})
        jobs.append({"job_n": j + 1, "spec": spec, "faults": job_faults})
    return jobs


class Local:
    name = "local"
    all_roles = ALL_ROLES
    all_workers = 2

    def command(self, args: list[str]) -> list[str]:
        return [sys.executable, "-m", "multiworker", "run", str(JOB), "-q", *args]

    def env(self) -> dict:
        return {}

    def leftovers(self, job_id: str) -> list[str]:
        left = [f"pid {pid}" for pid in job_processes(job_id)]
        if Path(f"/run/netns/{netns_name(job_id)}").exists():
            left.append(f"netns {netns_name(job_id)}")
        return left + _containers(job_id)

    def close(self) -> None:
        pass


class Ray:
    """A two-host Ray cluster for the soak's Ray jobs; the launcher runs in the head's namespace."""

    name = "ray"
    all_roles = tuple(s.replace("worker.replicas=2", "worker.replicas=1") for s in ALL_ROLES)  # 4 CPUs in all
    all_workers = 1

    def __init__(self) -> None:
        from ray_netns import RAY_ENV, TwoHostRay, unavailable_reason

        reason = unavailable_reason()
        if reason:
            raise SystemExit(f"--backend ray: {reason}")
        self.ray_env = RAY_ENV
        # the Ray nodes start the replicas, in directories of their own: an absolute path makes them
        # import this checkout's multiworker (a relative PYTHONPATH=src would fall back to the installed one)
        os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])
        self.cluster = TwoHostRay()
        self.cluster.start()

    def command(self, args: list[str]) -> list[str]:
        return [*self.cluster.exec_in(self.cluster.head_ns), sys.executable, "-m", "multiworker", "run", str(JOB),
                "--backend", "ray", "--ray-address", self.cluster.address, "-q", *args]

    def env(self) -> dict:
        return dict(self.ray_env)

    def leftovers(self, job_id: str) -> list[str]:
        return [f"pid {pid}" for pid in job_processes(job_id)] + _containers(job_id)  # both hosts share /proc

    def close(self) -> None:
        self.cluster.stop()


def _containers(job_id: str) -> list[str]:
    for tool in ("docker", "podman"):
        if shutil.which(tool):
            proc = subprocess.run([tool, "ps", "-a", "-q", "--filter", f"label=multiworker.job={job_id}"],
                                  capture_output=True, text=True, check=False)
            return [f"container {c}" for c in proc.stdout.split()]
    return []


def _fired_at(events: list[dict], injection: str) -> float | None:
    """When the injection's event says it was sent (``InjectedFailure ... sent`` or, for a PREEMPT,
    ``Preempted``); None if it never was."""
    key = str(parse_injection(injection))
    for e in events:
        message = e.get("message") or ""
        if not message.startswith(f"{key}:"):
            continue
        if e["reason"] == "Preempted" or (e["reason"] == "InjectedFailure" and ": sent " in message):
            return float(e["ts"])
    return None


def _moments(times: list[float], gap: float = 1.0) -> int:
    """How many separate moments the faults fired at (those less than ``gap`` seconds apart are one)."""
    times = sorted(times)
    return sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] >= gap)


def run_job(backend, home: Path, spec: str, trainer: list[str] | None, injections: list[str],
            hang_timeout: str) -> dict:
    trainer = TRAINER[spec] if trainer is None else trainer
    sets = [] if spec == "mwms" else [a for s in backend.all_roles for a in ("--set", s)]
    # a restart per fault and some to spare (a fault may stop a group twice: the replica, then its peers)
    policy = {"backoff": "0.1s", "backoff_limit": 2 * len(injections) + 2}
    if injections:
        policy["hang_timeout"] = hang_timeout  # a STOP with no CONT is found as a hang
    args = [*sets, *[a for k, v in policy.items() for a in ("--set", f"run_policy.{k}={v}")]]
    args += [a for inj in injections for a in ("--inject-failure", inj)]
    env = {**os.environ, **backend.env(), "MULTIWORKER_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    load = os.getloadavg()[0]
    start = time.monotonic()
    try:
        proc = subprocess.run([*backend.command([*args, "--", *trainer])], capture_output=True, text=True, env=env,
                              timeout=TIMEOUT + 300 * len(injections), check=False)
        exit_code, tail = proc.returncode, "" if proc.returncode == 0 else (proc.stdout[-800:] + proc.stderr[-800:])
    except subprocess.TimeoutExpired as exc:
        exit_code, tail = None, f"timed out after {exc.timeout:g}s"
    wall = time.monotonic() - start
    store = Store(home)
    job = store.list_jobs()[0]
    metrics_file = Path(job.output_dir or "", "metrics.json")
    metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
    events = store.events(job.id)
    running = [j.id for j in store.list_jobs() if not j.is_terminal]
    fired = {inj: _fired_at(events, inj) for inj in injections}
    started = min((float(e["ts"]) for e in events), default=0.0)
    return {"job": job.id, "state": job.state.value, "exit": exit_code, "restarts": job.restarts,
            "wall_seconds": round(wall, 1), "load_before": round(load, 1), "load_after": round(os.getloadavg()[0], 1),
            "accuracy": metrics.get("test_accuracy"),
            "steps": metrics["steps_per_epoch"] * metrics["epochs"] if "steps_per_epoch" in metrics else None,
            "fired": {inj: t is not None for inj, t in fired.items()},
            "fired_at_seconds": {inj: round(t - started, 1) for inj, t in fired.items() if t is not None},
            "moments": _moments([t for t in fired.values() if t is not None]),
            "hangs": sum(e["reason"] == "Hung" for e in events),
            "leftovers": backend.leftovers(job.id), "records_running": running, "tail": tail}


def soak(backend, jobs: list[dict], trainer: list[str] | None, tolerance: float, clean_runs: int,
         hang_timeout: str) -> dict:
    clean: dict[str, list[dict]] = {}
    for spec in sorted({j["spec"] for j in jobs}):
        clean[spec] = []
        for _ in range(clean_runs):
            home = Path(tempfile.mkdtemp(prefix="mw-soak-"))
            run = run_job(backend, home, spec, trainer, [], hang_timeout)
            clean[spec].append(run)
            print(f"[{backend.name}] clean {spec}: {json.dumps(run)}", file=sys.stderr, flush=True)
            if run["state"] == "Succeeded" and not run["leftovers"]:
                shutil.rmtree(home, ignore_errors=True)
    reference = {spec: _mean([r["accuracy"] for r in runs]) for spec, runs in clean.items()}
    steps = {spec: next((r["steps"] for r in runs if r["steps"]), None) for spec, runs in clean.items()}
    results = []
    for job in jobs:
        total = steps[job["spec"]]
        if total is None:
            raise SystemExit(f"[{backend.name}] the clean {job['spec']} runs wrote no metrics: {clean[job['spec']]}")
        for f in job["faults"]:
            f["injection"] = f"{f['target']}@step:{int(total * f['at'])}:{f['kind']}"
        home = Path(tempfile.mkdtemp(prefix="mw-soak-"))
        result = {**job, **run_job(backend, home, job["spec"], trainer, [f["injection"] for f in job["faults"]],
                                   hang_timeout)}
        ref = reference[job["spec"]]
        result["accuracy_delta_points"] = (None if result["accuracy"] is None or ref is None
                                           else round(100 * (result["accuracy"] - ref), 2))
        result["ok"] = (result["state"] == "Succeeded" and all(result["fired"].values()) and not result["leftovers"]
                        and not result["records_running"] and result["accuracy_delta_points"] is not None
                        and abs(result["accuracy_delta_points"]) <= tolerance)
        results.append(result)
        for f in job["faults"]:  # one line a fault, for the log
            print(f"[{backend.name}] fault {f['n']} (job {job['job_n']}/{len(jobs)}, {job['spec']}, "
                  f"{result['job']}) {f['injection']}: " + json.dumps({
                      "fired": result["fired"][f["injection"]], "state": result["state"]}),
                  file=sys.stderr, flush=True)
        print(f"[{backend.name}] job {job['job_n']}/{len(jobs)}: {json.dumps(result)}", file=sys.stderr, flush=True)
        if result["ok"]:
            shutil.rmtree(home, ignore_errors=True)
    accuracies = {spec: [r["accuracy"] for r in runs] for spec, runs in clean.items()}
    return {"backend": backend.name, "clean": clean, "clean_accuracy": accuracies, "reference": reference,
            "clean_spread_points": {spec: _spread(a) for spec, a in accuracies.items()},
            "jobs": results, "faults": sum(len(r["faults"]) for r in results),
            "fired": sum(sum(r["fired"].values()) for r in results),
            "moments": sum(r["moments"] for r in results),
            "succeeded": sum(r["state"] == "Succeeded" for r in results),
            "within_tolerance": sum(r["accuracy_delta_points"] is not None
                                    and abs(r["accuracy_delta_points"]) <= tolerance for r in results),
            "leftovers": sum(bool(r["leftovers"]) for r in results),
            "records_running": sum(bool(r["records_running"]) for r in results)}


def _mean(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _spread(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return round(100 * (max(values) - min(values)), 2) if len(values) > 1 else None


def table(reports: list[dict], tolerance: float) -> str:
    lines = [f"| backend | faults (fired, at separate moments) | jobs | roles x kinds | jobs Succeeded | accuracy "
             f"within ±{tolerance:g} pt | max abs delta (pt) | clean spread (pt) | jobs with leftovers | "
             "records left Running |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in reports:
        n = len(r["jobs"])
        faults = [f for j in r["jobs"] for f in j["faults"]]
        pairs = len({(f["role"], f["kind"]) for f in faults})
        deltas = [abs(j["accuracy_delta_points"]) for j in r["jobs"] if j["accuracy_delta_points"] is not None]
        spread = ", ".join(f"{s} {v}" for s, v in r["clean_spread_points"].items())
        lines.append(f"| {r['backend']} | {r['faults']} ({r['fired']}, {r['moments']}) | {n} | {pairs} pairs | {r['succeeded']}/{n} | "
                     f"{r['within_tolerance']}/{n} | {max(deltas) if deltas else '-'} | {spread} | {r['leftovers']} | "
                     f"{r['records_running']} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    argv, extra = split_args(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=10, help="faults per backend (default 10)")
    parser.add_argument("--faults-per-job", type=int, default=1, help="faults one job carries (default 1)")
    parser.add_argument("--backend", nargs="+", default=["local"], choices=["local", "ray"])
    parser.add_argument("--roles", nargs="+", default=["chief", "worker", "ps", "evaluator"])
    parser.add_argument("--kinds", nargs="+", default=["KILL", "TERM", "STOP", "PREEMPT=10s"],
                        help="what follows the step in --inject-failure (default KILL TERM STOP PREEMPT=10s)")
    parser.add_argument("--hang-timeout", default="30s", help="run_policy.hang_timeout of the faulted jobs (30s)")
    parser.add_argument("--clean-runs", type=int, default=2, help="clean runs per spec and backend (default 2)")
    parser.add_argument("--tolerance", type=float, default=0.5, help="accuracy points from the clean mean (0.5)")
    args = parser.parse_args(argv)
    trainer = extra or None  # None: TRAINER, per spec
    reports = []
    for name in args.backend:
        backend = Local() if name == "local" else Ray()
        jobs = plan(args.faults, args.faults_per_job, args.roles, args.kinds, backend.all_workers)
        try:
            reports.append(soak(backend, jobs, trainer, args.tolerance, args.clean_runs, args.hang_timeout))
        finally:
            backend.close()
    print(json.dumps({"command": "python bench/soak.py " + " ".join(sys.argv[1:]), "trainer_args": trainer or TRAINER,
                      "date": time.strftime("%Y-%m-%d"), "host": os.uname().nodename, "cpus": os.cpu_count(),
                      "reports": reports}, indent=2))
    print(table(reports, args.tolerance))
    ok = all(j["ok"] for r in reports for j in r["jobs"])
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
