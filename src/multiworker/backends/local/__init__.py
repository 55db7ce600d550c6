"""The ``local`` backend: every replica a supervised process on this machine."""

from __future__ import annotations

from multiworker.backends.local.backend import LocalBackend
from multiworker.backends.local.group import LocalGroup

__all__ = ["LocalBackend", "LocalGroup"]
