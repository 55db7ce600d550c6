"""What a check reports, and the trainer's source as the checks see it."""

from __future__ import annotations

import ast
import dataclasses
import os
from pathlib import Path

__all__ = ["Finding", "TrainerSource", "SourceFile"]


@dataclasses.dataclass(frozen=True)
class Finding:
    code: str  # short name of the mistake, e.g. "keras3-mwms"
    file: str
    line: int
    message: str
    fix: str

    def __str__(self) -> str:
        shown = self.file
        if os.path.isabs(shown) and not (rel := os.path.relpath(shown)).startswith(".."):
            shown = rel  # under the current directory: shorter, and still a path to open
        return f"{shown}:{self.line}: [{self.code}] {self.message}\n    fix: {self.fix}"


@dataclasses.dataclass
class SourceFile:
    path: Path
    text: str
    tree: ast.Module

    @property
    def name(self) -> str:
        return str(self.path)


@dataclasses.dataclass
class TrainerSource:
    """The trainer's Python files (its package, or its script), parsed."""

    root: Path  # the working directory the replicas start in
    files: list[SourceFile]

    @property
    def text(self) -> str:
        return "\n".join(f.text for f in self.files)
