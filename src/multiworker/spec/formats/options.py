"""The options that make a job of any format runnable here (``run``, ``validate``, ``tune``, ``gcloud``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from multiworker.spec.load import DEFAULT_MAX_REPLICAS

__all__ = ["LoadOptions"]


@dataclasses.dataclass(frozen=True)
class LoadOptions:
    """How to load a job: its format, ``--set`` overrides and the mappings that make it local.

    ``format``: force a format (else detected). ``overrides``: ``--set`` native field paths.
    ``images``: ``IMAGE=COMMAND`` mappings; ``dockerfile``: run a Dockerfile's entry point.
    ``map_paths``: ``gs://bucket=./dir``, relative to ``cwd`` (default: the current directory).
    ``check``: an unmapped image or gs:// path is an error and every program must exist; without it
    they are left as they are (a platform-managed backend). ``max_replicas``: the replica cap.
    ``unpack``: unpack package archives (``validate`` checks them from their index instead).
    ``containers``: the pools run as containers of their images: programs and images stay as the
    spec gives them (only gs:// paths are mapped).
    """

    format: str | None = None
    overrides: Sequence[str] = ()
    images: Sequence[str] = ()
    dockerfile: str | None = None
    map_paths: Sequence[str] = ()
    check: bool = True
    cwd: Path | None = None
    max_replicas: int = DEFAULT_MAX_REPLICAS
    unpack: bool = True
    containers: bool = False

    def __post_init__(self) -> None:
        for name in ("overrides", "images", "map_paths"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.cwd is not None:
            object.__setattr__(self, "cwd", Path(self.cwd))

    def directory(self) -> Path:
        """The directory ``map_paths`` (and a gcloud line's paths) are relative to."""
        return self.cwd if self.cwd is not None else Path.cwd()
