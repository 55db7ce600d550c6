"""JobSet ``jobset.x-k8s.io/v1alpha2``: read (``reader``, through the TFJob reader) and write (``writer``) manifests."""

from multiworker.spec.formats.jobset.reader import parse
from multiworker.spec.formats.jobset.writer import (
    API_VERSION,
    DEADLINE_RULE,
    PORT,
    PROGRAM_ERROR_RULE,
    hostnames,
    write,
)

__all__ = ["parse", "write", "hostnames", "API_VERSION", "PORT", "PROGRAM_ERROR_RULE", "DEADLINE_RULE"]
