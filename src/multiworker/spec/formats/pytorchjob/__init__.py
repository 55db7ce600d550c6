"""Kubeflow PyTorchJob ``kubeflow.org/v1`` (write only)."""

from multiworker.spec.formats.pytorchjob.writer import write

__all__ = ["write"]
