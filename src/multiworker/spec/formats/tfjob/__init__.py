"""Kubeflow TFJob ``kubeflow.org/v1``: read (``reader``) and write (``writer``) manifests."""

from multiworker.spec.formats.tfjob.reader import (
    ACCELERATOR_LABEL,
    AIP_DIRS,
    CONTAINER,
    GPU_RESOURCE,
    INSTANCE_TYPE_LABEL,
    REPLICA_TYPES,
    RESTART_STRICTNESS,
    parse,
)
from multiworker.spec.formats.tfjob.writer import pod, write

__all__ = ["parse", "write", "pod", "REPLICA_TYPES", "CONTAINER", "RESTART_STRICTNESS", "INSTANCE_TYPE_LABEL",
           "ACCELERATOR_LABEL", "GPU_RESOURCE", "AIP_DIRS"]
