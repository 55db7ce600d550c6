"""The home's disk fills during a job: the driver reports it once and keeps supervising (it once
crashed, killed the healthy replica and left the job Lost)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import mw, no_processes_left, status

FILLER = textwrap.dedent('''
    import os, sys, time
    from multiworker.metrics_line import format_metric
    replica = os.environ["MULTIWORKER_REPLICA"]
    filler = os.path.join(os.environ["MW_FULL_DIR"], "filler")
    if replica == "worker-1":  # fill the disk, hold it full for a while, then free it
        with open(filler, "wb") as f:
            try:
                while True:
                    f.write(b"x" * 65536)
                    f.flush()
            except OSError:
                pass
        time.sleep(4)
        os.unlink(filler)
    for epoch in range(1, 4):
        time.sleep(0.5)
        try:
            print(format_metric("epoch", epoch=epoch, epochs=3, loss=1.0 / epoch), flush=True)
        except OSError:
            pass
''')


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="needs root to mount a small tmpfs")
def test_full_disk_is_reported_and_supervision_goes_on(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(home)], check=True)
    try:
        (tmp_path / "filler_prog.py").write_text(FILLER)
        spec = tmp_path / "job.yaml"
        spec.write_text(f"name: full\ncommand: [{sys.executable}, filler_prog.py]\nworking_dir: {tmp_path}\n"
                        f"env: {{MW_FULL_DIR: '{home}'}}\npools: {{worker: {{replicas: 2}}}}\n"
                        "run_policy: {backoff_limit: 0}\n")
        proc = mw("run", str(spec), home=home, timeout=600)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "cannot write the job's records" in proc.stdout, proc.stdout[-3000:]
        assert proc.returncode == 0, proc.stdout[-3000:]
        doc = status(home)
        assert doc["state"] == "Succeeded"
        assert no_processes_left(doc["id"])
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)


FAIL_FULL = textwrap.dedent('''
    import os, sys, time
    replica = os.environ["MULTIWORKER_REPLICA"]
    if replica == "worker-1":  # fill the disk and fail, leaving it full
        with open(os.path.join(os.environ["MW_FULL_DIR"], "filler"), "wb") as f:
            try:
                while True:
                    f.write(b"x" * 65536)
                    f.flush()
            except OSError:
                pass
        print("worker-1: giving up", flush=True)
        sys.exit(3)
    time.sleep(600)
''')


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("mount"), reason="needs root to mount a small tmpfs")
def test_a_job_that_fails_while_the_disk_is_full_is_recorded_failed_not_lost(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(home)], check=True)
    try:
        (tmp_path / "fail_prog.py").write_text(FAIL_FULL)
        spec = tmp_path / "job.yaml"
        spec.write_text(f"name: full\ncommand: [{sys.executable}, fail_prog.py]\nworking_dir: {tmp_path}\n"
                        f"env: {{MW_FULL_DIR: '{home}'}}\npools: {{worker: {{replicas: 2}}}}\n"
                        "run_policy: {backoff_limit: 0}\n")
        proc = mw("run", str(spec), home=home, timeout=180)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert proc.returncode == 1, proc.stdout[-3000:]
        (home / "filler").unlink()  # space again, the driver long gone
        doc = status(home)
        assert doc["state"] == "Failed", doc["message"]
        assert "worker-1" in doc["message"]
        assert no_processes_left(doc["id"])
    finally:
        subprocess.run(["umount", "-l", str(home)], check=False)
