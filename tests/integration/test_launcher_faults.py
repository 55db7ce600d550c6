"""Faults around a running job: output floods before the last metric line, a second Ctrl-C while
replicas ignore SIGTERM, and a console reader that goes away."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import mw, mw_popen, no_processes_left, running_job, status, wait_for

from multiworker.job import Store

FLOOD = textwrap.dedent('''
    import sys
    from multiworker.metrics_line import format_metric
    sys.stdout.write(("x" * 1023 + "\\n") * 3000)  # 3 MiB at once, then the result and exit
    print(format_metric("final", test_accuracy=0.5), flush=True)
''')

STUBBORN = textwrap.dedent('''
    import signal, time
    signal.signal(signal.SIGTERM, lambda *_: print("SIGTERM ignored", flush=True))
    print("ignoring SIGTERM", flush=True)
    while True:
        time.sleep(1)
''')


def _spec(tmp_path, program: str, body: str, extra: str = "") -> str:
    (tmp_path / program).write_text(body)
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: t\ncommand: [{sys.executable}, {program}]\nworking_dir: {tmp_path}\n"
                    f"pools: {{worker: {{replicas: 2}}}}\n{extra}")
    return str(spec)


def test_final_metrics_after_a_flood_of_output_are_kept(tmp_path, mw_home):
    proc = mw("run", _spec(tmp_path, "flood.py", FLOOD), "-q", home=mw_home, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:]
    finals = Store(mw_home).metrics(status(mw_home)["id"], "final")
    assert sorted(m["replica"] for m in finals) == ["worker-0", "worker-1"]


@contextlib.contextmanager
def _stubborn_job(tmp_path, mw_home, grace: str):
    """Launch two replicas that ignore SIGTERM; yield (launcher, job) once they have installed
    their handler. Afterwards nothing of theirs is left running, whatever the test did."""
    spec = _spec(tmp_path, "stubborn.py", STUBBORN, f"run_policy: {{grace_period: {grace}}}\n")
    launcher = mw_popen("run", spec, "-q", home=mw_home)
    try:
        job = running_job(mw_home)
        _wait_in_logs(mw_home, job, "ignoring SIGTERM")  # the replicas have installed their handler
        yield launcher, job
    finally:
        if launcher.poll() is None:
            launcher.kill()
            subprocess.run(["pkill", "-9", "-f", "stubborn.py"], check=False)


def _wait_in_logs(mw_home, job, text: str) -> None:
    logs = [Path(mw_home, "jobs", job.id, "attempt_0", f"worker-{i}.log") for i in (0, 1)]
    wait_for(lambda: all(log.exists() and text in log.read_text() for log in logs), timeout=600)


def _grace_events(mw_home, job: dict) -> list[dict]:
    return [e for e in Store(mw_home).events(job.id) if e["reason"] == "GracePeriodExceeded"]


def test_a_replica_that_ignores_sigterm_is_killed_after_the_grace_period_and_told(tmp_path, mw_home):
    with _stubborn_job(tmp_path, mw_home, "1s") as (launcher, job):
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=30)
        assert launcher.returncode == 130
        events = _grace_events(mw_home, job)
        assert sorted(e["replica"] for e in events) == ["worker-0", "worker-1"]
        assert "multiworker.trainer.strategy()" in events[0]["message"]
        assert no_processes_left(job.id)


def test_second_ctrl_c_kills_every_replica_at_once(tmp_path, mw_home):
    with _stubborn_job(tmp_path, mw_home, "120s") as (launcher, job):
        launcher.send_signal(signal.SIGINT)
        _wait_in_logs(mw_home, job, "SIGTERM ignored")  # the first stop is under way: grace begins
        launcher.send_signal(signal.SIGINT)
        launcher.wait(timeout=90)  # well inside the 120 s grace period, which the second Ctrl-C cuts
        assert launcher.returncode == 130
        assert status(mw_home)["state"] == "Cancelled"
        assert no_processes_left(job.id)
        assert not _grace_events(mw_home, job)  # the user cut the grace period: nothing to explain


def test_a_reader_that_goes_away_does_not_end_the_job(tmp_path, mw_home):
    """`run ... | head`: once the pipe's reader is gone the console falls silent and the job trains
    on to its end (it used to die of the broken pipe, recorded Failed: "supervisor error: SystemExit(1)")."""
    from helpers import fake_spec

    spec = fake_spec(tmp_path, "{worker: {replicas: 2}}")
    launcher = mw_popen("run", str(spec), "--", "--epochs", "30", "--epoch-seconds", "0.2", home=mw_home)
    try:
        assert launcher.stdout.readline()  # the job started and printed
        launcher.stdout.close()  # the reader goes away, as `head` does
        assert launcher.wait(timeout=600) == 0
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    doc = status(mw_home)
    assert doc["state"] == "Succeeded" and doc["epoch"] == 30, doc
    assert no_processes_left(doc["id"])
