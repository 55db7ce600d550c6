"""Backends run a validated job spec somewhere: ``local`` (processes on this machine) is the default."""

__all__ = ["BACKENDS"]

BACKENDS = ("local",)
