"""AI Platform Training ``trainingInput``: read (``reader``), write (``writer``) and the
``gcloud ai-platform jobs submit training`` line (``gcloud``)."""

from multiworker.spec.formats.aiplatform.gcloud import SUBMIT, submit
from multiworker.spec.formats.aiplatform.reader import (
    JOB_DIR_FLAG,
    SINGLE_MACHINE_TIERS,
    TIERS,
    parse,
)
from multiworker.spec.formats.aiplatform.writer import write

__all__ = ["parse", "write", "TIERS", "SINGLE_MACHINE_TIERS", "JOB_DIR_FLAG", "SUBMIT", "submit"]
