"""The ``containers`` backend (``multiworker run SPEC --containers``): every replica a container of
its pool's image on a private network for the job, supervised here like local processes."""

from multiworker.backends.containers.backend import ContainersBackend, ContainersOptions

__all__ = ["ContainersBackend", "ContainersOptions"]
