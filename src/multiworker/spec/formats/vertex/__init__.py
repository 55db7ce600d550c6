"""Vertex AI CustomJob: read (``reader``), write (``writer``) and the ``gcloud ai custom-jobs`` line (``gcloud``)."""

from multiworker.spec.formats.vertex.gcloud import CREATE, LOCAL_RUN, create, local_run
from multiworker.spec.formats.vertex.reader import POOL_ROLES, VertexJobOutput, parse
from multiworker.spec.formats.vertex.writer import write

__all__ = ["parse", "write", "POOL_ROLES", "VertexJobOutput", "CREATE", "LOCAL_RUN", "create", "local_run"]
