"""The import rules in pyproject.toml ([tool.importlinter]) hold: only a backend's own folder
imports its internals, and the trainer package imports in one direction."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"


def _contracts() -> list[dict]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]


def test_every_backend_folder_is_protected():
    """A new backend folder comes with its own rule: only it imports its internals."""
    folders = sorted(p.name for p in (SRC / "multiworker" / "backends").iterdir()
                     if p.is_dir() and (p / "__init__.py").exists())
    protected = {m for c in _contracts() if c["type"] == "protected" for m in c["protected_modules"]}
    assert folders and [f"multiworker.backends.{f}" for f in folders if f"multiworker.backends.{f}" not in protected] == []


def test_lint_imports_passes():
    if not any(Path(p, "importlinter").is_dir() for p in sys.path):
        pytest.skip("import-linter is not installed (pip install 'multiworker[dev]')")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_lint_imports_catches_a_reader_importing_local_internals(tmp_path):
    """The rule bites: a copy of the package where status.py imports backends.local fails it."""
    if not any(Path(p, "importlinter").is_dir() for p in sys.path):
        pytest.skip("import-linter is not installed (pip install 'multiworker[dev]')")
    import shutil

    shutil.copytree(SRC / "multiworker", tmp_path / "src" / "multiworker",
                    ignore=shutil.ignore_patterns("__pycache__", "schemas"))
    status = tmp_path / "src" / "multiworker" / "status.py"
    status.write_text(status.read_text() + "\nfrom multiworker.backends.local.group import LocalGroup  # noqa\n")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    proc = subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode != 0
    assert "multiworker.status -> multiworker.backends.local.group" in proc.stdout
