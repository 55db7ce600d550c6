"""Every class of bad native spec gives one SpecError naming the file and the field (CLI: exit 2)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from multiworker.errors import SpecError
from multiworker.spec import load_spec
from multiworker.spec.model import parse_duration

BASE = "name: job\nmodule: trainer.task\nworking_dir: .\n"


def write(project, body: str):
    path = project / "job.yaml"
    path.write_text(textwrap.dedent(body))
    return path


CASES = [
    ("unknown-key", BASE + "pools: {worker: {replicas: 2, replcas: 3}}", "pools.worker.replcas", "did you mean `replicas`"),
    ("unknown-top-key", BASE + "pools: {worker: {}}\nrun_polcy: {}", "run_polcy", "did you mean `run_policy`"),
    ("unknown-role", BASE + "pools: {workers: {replicas: 2}}", "pools.workers", "did you mean `worker`"),
    ("two-chiefs", BASE + "pools: {chief: {replicas: 2}, worker: {}}", "pools.chief.replicas is 2", "at most one chief"),
    ("no-chief-or-worker", BASE + "pools: {evaluator: {replicas: 1}}", "no chief and no worker", "pools.worker.replicas"),
    ("ps-without-chief", BASE + "pools: {worker: {replicas: 2}, ps: {replicas: 1}}", "pools.ps needs a chief", "chief: {replicas: 1}"),
    ("negative-replicas", BASE + "pools: {worker: {replicas: -1}}", "pools.worker.replicas", "0 or more"),
    ("bad-duration", BASE + "pools: {worker: {}}\nrun_policy: {active_deadline: 3 weeks}", "run_policy.active_deadline", "'30m'"),
    ("bad-restart-policy", BASE + "pools: {worker: {}}\nrun_policy: {restart_policy: Sometimes}", "run_policy.restart_policy", "OnFailure"),
    ("missing-module", "name: job\nmodule: trainer.nope\npools: {worker: {}}", "module", "trainer/nope.py"),
    ("missing-working-dir", BASE.replace("working_dir: .", "working_dir: src") + "pools: {worker: {}}", "working_dir", "does not exist"),
    ("module-and-command", BASE + "command: [python, x.py]\npools: {worker: {}}", "", "either `module` or `command`"),
    ("missing-name", "module: trainer.task\npools: {worker: {}}", "name", "is required"),
    ("bad-name", BASE.replace("name: job", "name: 'my job!'") + "pools: {worker: {}}", "name", "letters, digits"),
    ("not-a-mapping", "- just\n- a list\n", "", "a YAML mapping"),
    ("bad-yaml", "name: [unclosed\n", "line", "invalid YAML"),
]


@pytest.mark.parametrize("body,field,fix", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_spec_is_one_line_error(project, body, field, fix):
    path = write(project, body)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert field in message and fix in message, message
    assert "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(SpecError, match="no such file"):
        load_spec(tmp_path / "nope.yaml")


def test_cli_exit_code_2_without_traceback(project):
    path = write(project, BASE + "pools: {worker: {replicas: 2, replcas: 3}}")
    proc = subprocess.run([sys.executable, "-m", "multiworker", "validate", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0
    assert "did you mean `replicas`" in proc.stderr


def test_cli_debug_shows_traceback(project):
    path = write(project, BASE + "pools: {worker: {replcas: 3}}")
    proc = subprocess.run([sys.executable, "-m", "multiworker", "--debug", "validate", str(path)], capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_valid_spec_defaults_and_overrides(project):
    path = write(project, BASE + "args: [--epochs, 2]\nenv: {A: '1'}\npools:\n  worker: {replicas: 2, env: {B: 2}}\n")
    loaded = load_spec(path, overrides=["pools.worker.replicas=3", "run_policy.active_deadline=30m"])
    spec = loaded.spec
    assert spec.replica_counts() == {"worker": 3}
    assert spec.run_policy.active_deadline == 1800
    program = spec.resolved("worker")
    assert program.module == "trainer.task" and program.args == ["--epochs", "2"]
    assert program.env == {"A": "1", "B": "2"}


def test_bad_override(project):
    path = write(project, BASE + "pools: {worker: {}}")
    with pytest.raises(SpecError, match="KEY=VALUE"):
        load_spec(path, overrides=["pools.worker.replicas"])
    with pytest.raises(SpecError, match="pools.worker.replicas"):
        load_spec(path, overrides=["pools.worker.replicas=-2"])


@pytest.mark.parametrize("text,seconds", [("90s", 90), ("30m", 1800), ("1h30m", 5400), ("2d", 172800), (45, 45), ("1.5", 1.5)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "3x", "m30", "-5", "1h 30x"])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_schema_export():
    proc = subprocess.run([sys.executable, "-m", "multiworker", "schema"], capture_output=True, text=True, check=True)
    import json

    schema = json.loads(proc.stdout)
    assert "pools" in schema["properties"] and "run_policy" in schema["properties"]


@pytest.mark.parametrize("argv", [["convert", "x", "--bogus"], ["run"], ["stats"]], ids=["bad-option", "missing-arg", "bad-command"])
def test_cli_usage_errors_exit_2_without_traceback(argv):
    proc = subprocess.run([sys.executable, "-m", "multiworker", *argv], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "Error:" in proc.stderr
