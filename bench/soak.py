"""Reliability soak: N injected faults across roles and kinds, each in a real MNIST job, on the local
backend and on Ray across a two-host cluster (two network namespaces, tests/integration/ray_netns.py).

Each fault is one job with one ``--inject-failure ROLE-INDEX@step:S:KIND``, S a step in the middle
of training, rotating over ``--roles`` (chief, worker, ps, evaluator) and ``--kinds``. A kind is
whatever follows the step in the injection syntax (KILL, TERM; STOP or PREEMPT=30s where the
launcher has them), so new kinds need no change here. A job with a chief, ps or evaluator runs the
spec with those pools (chief 1, worker 2, ps 1, evaluator 1; on the Ray cluster, 2 CPUs per host, one
worker); worker faults run the plain two-worker spec (MultiWorkerMirroredStrategy), on worker-1 and
worker-0 in turn.

After each job it checks: the job Succeeded; its final test accuracy is within ``--tolerance``
points of a clean run of the same spec and backend; no process of the job is left (on either
host), no network namespace ``mw-<job>``, no container labelled with the job, and no job record
left Running in the store. Prints a JSON report and a markdown table (the BENCHMARKS.md row).

Usage: python bench/soak.py [--faults 10] [--backend local ray] [--roles chief worker ps evaluator]
                            [--kinds KILL TERM] [--tolerance 0.5] [-- trainer args]
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

from multiworker.job import Store  # noqa: E402
from multiworker.netns import netns_name  # noqa: E402
from multiworker.procs import job_processes  # noqa: E402

JOB = REPO / "examples" / "mnist" / "job.yaml"
#: small enough for a soak of many jobs, long enough that a fault lands mid-training
TRAINER = ["--epochs", "2", "--steps-per-epoch", "60", "--backup-every", "10"]
ALL_ROLES = ("pools.chief.replicas=1", "pools.worker.replicas=2", "pools.ps.replicas=1",
             "pools.evaluator.replicas=1")
TIMEOUT = 900


def spec_for(role: str) -> str:
    """``mwms`` (two workers) for worker faults, ``all`` (chief, workers, ps, evaluator) otherwise."""
    return "mwms" if role == "worker" else "all"


def plan(faults: int, roles: list[str], kinds: list[str], steps: int) -> list[dict]:
    """The faults: roles in turn, kinds in turn per round of roles, steps spread over the middle."""
    out = []
    for i in range(faults):
        role = roles[i % len(roles)]
        kind = kinds[(i // len(roles)) % len(kinds)]
        index = (i // len(roles)) % 2 if role == "worker" else 0
        index = 1 - index if role == "worker" else index  # worker-1 first: the chief's peer
        step = int(steps * (0.3 + 0.4 * ((i * 7) % 10) / 10))
        out.append({"n": i + 1, "spec": spec_for(role), "injection": f"{role}-{index}@step:{step}:{kind}",
                    "role": role, "kind": kind})
    return out


class Local:
    name = "local"
    all_roles = ALL_ROLES

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

    def __init__(self) -> None:
        from ray_netns import RAY_ENV, TwoHostRay, unavailable_reason

        reason = unavailable_reason()
        if reason:
            raise SystemExit(f"--backend ray: {reason}")
        self.ray_env = RAY_ENV
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


def run_job(backend, home: Path, spec: str, trainer: list[str], injection: str | None) -> dict:
    sets = [] if spec == "mwms" else [a for s in backend.all_roles for a in ("--set", s)]
    args = [*sets, "--set", "run_policy.backoff=0.5s", "--set", "run_policy.backoff_limit=3"]
    args += ["--inject-failure", injection] if injection else []
    env = {**os.environ, **backend.env(), "MULTIWORKER_HOME": str(home),
           "PYTHONPATH": os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")])}
    start = time.monotonic()
    proc = subprocess.run([*backend.command([*args, "--", *trainer])], capture_output=True, text=True, env=env,
                          timeout=TIMEOUT, check=False)
    wall = time.monotonic() - start
    store = Store(home)
    job = store.list_jobs()[0]
    metrics = Path(job.output_dir or "", "metrics.json")
    accuracy = json.loads(metrics.read_text()).get("test_accuracy") if metrics.is_file() else None
    events = store.events(job.id)
    running = [j.id for j in store.list_jobs() if not j.is_terminal]
    return {"job": job.id, "state": job.state.value, "exit": proc.returncode, "restarts": job.restarts,
            "wall_seconds": round(wall, 1), "accuracy": accuracy,
            "fired": any(e["reason"] == "InjectedFailure" and "sent" in (e["message"] or "") for e in events),
            "leftovers": backend.leftovers(job.id), "records_running": running,
            "tail": "" if proc.returncode == 0 else (proc.stdout[-800:] + proc.stderr[-800:])}


def soak(backend, faults: list[dict], trainer: list[str], tolerance: float) -> dict:
    clean: dict[str, dict] = {}
    for spec in sorted({f["spec"] for f in faults}):
        clean[spec] = run_job(backend, Path(tempfile.mkdtemp(prefix="mw-soak-")), spec, trainer, None)
        print(f"[{backend.name}] clean {spec}: {json.dumps(clean[spec])}", file=sys.stderr, flush=True)
    results = []
    for fault in faults:
        home = Path(tempfile.mkdtemp(prefix="mw-soak-"))
        result = {**fault, **run_job(backend, home, fault["spec"], trainer, fault["injection"])}
        ref = clean[fault["spec"]]["accuracy"]
        result["accuracy_delta_points"] = (None if result["accuracy"] is None or ref is None
                                           else round(100 * (result["accuracy"] - ref), 2))
        result["ok"] = (result["state"] == "Succeeded" and result["fired"] and not result["leftovers"]
                        and not result["records_running"] and result["accuracy_delta_points"] is not None
                        and abs(result["accuracy_delta_points"]) <= tolerance)
        results.append(result)
        print(f"[{backend.name}] {fault['n']}/{len(faults)} {fault['injection']}: {json.dumps(result)}",
              file=sys.stderr, flush=True)
        if result["ok"]:
            shutil.rmtree(home, ignore_errors=True)
    return {"backend": backend.name, "clean": clean, "faults": results,
            "succeeded": sum(r["state"] == "Succeeded" for r in results),
            "within_tolerance": sum(r["accuracy_delta_points"] is not None
                                    and abs(r["accuracy_delta_points"]) <= tolerance for r in results),
            "leftovers": sum(bool(r["leftovers"]) for r in results),
            "records_running": sum(bool(r["records_running"]) for r in results),
            "not_fired": sum(not r["fired"] for r in results)}


def table(reports: list[dict], tolerance: float) -> str:
    lines = [f"| backend | faults | roles x kinds | Succeeded | accuracy within ±{tolerance:g} pt | "
             "max abs delta (pt) | leftovers | records left Running | faults that never fired |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in reports:
        n = len(r["faults"])
        pairs = sorted({f"{f['role']}/{f['kind']}" for f in r["faults"]})
        deltas = [abs(f["accuracy_delta_points"]) for f in r["faults"] if f["accuracy_delta_points"] is not None]
        lines.append(f"| {r['backend']} | {n} | {', '.join(pairs)} | {r['succeeded']}/{n} | "
                     f"{r['within_tolerance']}/{n} | {max(deltas) if deltas else '-'} | {r['leftovers']} | "
                     f"{r['records_running']} | {r['not_fired']} |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    argv, extra = split_args(argv)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", type=int, default=10, help="faults per backend (default 10)")
    parser.add_argument("--backend", nargs="+", default=["local"], choices=["local", "ray"])
    parser.add_argument("--roles", nargs="+", default=["chief", "worker", "ps", "evaluator"])
    parser.add_argument("--kinds", nargs="+", default=["KILL", "TERM"],
                        help="what follows the step in --inject-failure: KILL, TERM (STOP, PREEMPT=30s where supported)")
    parser.add_argument("--tolerance", type=float, default=0.5, help="accuracy points from the clean run (0.5)")
    args = parser.parse_args(argv)
    trainer = extra or TRAINER
    steps = _total_steps(trainer)
    faults = plan(args.faults, args.roles, args.kinds, steps)
    reports = []
    for name in args.backend:
        backend = Local() if name == "local" else Ray()
        try:
            reports.append(soak(backend, faults, trainer, args.tolerance))
        finally:
            backend.close()
    print(json.dumps({"command": "python bench/soak.py " + " ".join(sys.argv[1:]), "trainer_args": trainer,
                      "date": time.strftime("%Y-%m-%d"), "host": os.uname().nodename, "cpus": os.cpu_count(),
                      "reports": reports}, indent=2))
    print(table(reports, args.tolerance))
    ok = all(f["ok"] for r in reports for f in r["faults"])
    return 0 if ok else 1


def _total_steps(trainer: list[str]) -> int:
    def value(flag: str, default: int) -> int:
        return int(trainer[trainer.index(flag) + 1]) if flag in trainer else default
    return value("--epochs", 2) * value("--steps-per-epoch", 60)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
