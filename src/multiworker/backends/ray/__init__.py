"""The ``ray`` backend: every replica a process on a Ray cluster's node, started by its own actor in
a placement group, supervised from here by the same group controller and policy as local replicas.

``ray`` itself is imported only when a job runs (``pip install 'multiworker[ray]'``).
"""

from __future__ import annotations

from multiworker.backends.ray.backend import RayBackend
from multiworker.backends.ray.group import RayGroup

__all__ = ["RayBackend", "RayGroup"]
