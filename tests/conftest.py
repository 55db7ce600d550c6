"""Shared test fixtures: an isolated MULTIWORKER_HOME for every test."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
PROGRAMS = FIXTURES / "programs"

# A suite started in the background by a non-interactive shell (`make test &`, nohup, some CI
# runners) inherits SIGINT ignored, and so would every command it starts, while the tests that send
# SIGINT expect what a terminal gives. A handler here is reset to the default in each child's exec.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def mw_home(tmp_path_factory, monkeypatch) -> Path:
    home = tmp_path_factory.mktemp("mwhome")
    monkeypatch.setenv("MULTIWORKER_HOME", str(home))
    return home


@pytest.fixture
def project(tmp_path):
    """A directory holding a minimal trainer package (trainer/task.py), for specs that must validate."""
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "task.py").write_text("print('hi')\n")
    return tmp_path


@pytest.fixture
def mw_bin() -> list[str]:
    """The multiworker command, from the interpreter running the tests."""
    return [sys.executable, "-m", "multiworker.cli"]


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "integration" in str(item.fspath) and "integration" not in item.keywords:
            item.add_marker(pytest.mark.integration)


os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
