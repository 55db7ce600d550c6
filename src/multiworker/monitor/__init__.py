"""Monitoring jobs from the terminal: logs, live view, plots, TensorBoard, and job housekeeping
(cancel, delete, gc). The CLI commands are thin wrappers over these modules."""

from __future__ import annotations

from multiworker.monitor.lifecycle import cancel_job, delete_job, gc_jobs
from multiworker.monitor.logs import follow_logs, log_files, read_logs

__all__ = ["cancel_job", "delete_job", "gc_jobs", "follow_logs", "log_files", "read_logs"]
