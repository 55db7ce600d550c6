"""``multiworker doctor``: the mistakes that otherwise show only on the cloud, found in the job's spec
and its trainer's source before anything runs. The source is parsed (``ast``), never imported or run.

Each :class:`Finding` names the file, the line and the fix. :func:`diagnose` returns them all.
"""

from __future__ import annotations

from multiworker.doctor._findings import Finding, TrainerSource
from multiworker.doctor._run import diagnose, diagnose_gcloud

__all__ = ["Finding", "TrainerSource", "diagnose", "diagnose_gcloud"]
