"""Where multiworker keeps its state: MULTIWORKER_HOME, default ``~/.multiworker``."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["home_dir"]


def home_dir() -> Path:
    """MULTIWORKER_HOME (made absolute: replicas run in other directories), default ~/.multiworker."""
    return Path(os.environ.get("MULTIWORKER_HOME") or Path.home() / ".multiworker").expanduser().absolute()
