"""Every `multiworker` command the docs show that runs in seconds here (no job, no cluster) is run,
and must succeed; the others are listed as skipped with where they are tested instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from doc_blocks import shell_commands

REPO = Path(__file__).resolve().parents[2]
COMMANDS = shell_commands(REPO / "docs")
# subcommands that neither start a job nor need a cluster, a server or a finished job
QUICK = {"validate", "convert", "schema", "list", "--help", "--version"}


def test_the_docs_show_commands():
    assert any(c.argv[:1] == ["multiworker"] for c in COMMANDS), [str(c) for c in COMMANDS]


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_a_documented_command_runs(command, tmp_path, mw_home):
    argv = command.argv
    if argv[:1] != ["multiworker"]:
        pytest.skip(f"not a multiworker command ({argv[0]}): `make` targets run in CI themselves")
    if not (set(argv[1:2]) & QUICK or "--help" in argv):
        pytest.skip("starts a job, a server or reads one: the examples' integration tests run it")
    env = {**os.environ, "MULTIWORKER_HOME": str(mw_home), "PYTHONPATH": str(REPO / "src")}
    done = subprocess.run([sys.executable, "-m", "multiworker", *argv[1:]], cwd=REPO, capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"


def test_comments_and_continuations_are_read_as_a_shell_would(tmp_path):
    (tmp_path / "page.md").write_text("text\n```sh\nmultiworker run a.yaml \\\n  --set x=1   # a comment\n"
                                      "$ multiworker list '#not a comment'\n```\n```python\nprint()\n```\n")
    assert [(c.line, c.argv) for c in shell_commands(tmp_path)] == [
        (3, ["multiworker", "run", "a.yaml", "--set", "x=1"]), (5, ["multiworker", "list", "#not a comment"])]
