"""TensorFlow's peer heartbeat set past the launcher's hang timeout, so a hang is diagnosed first.

Under MultiWorkerMirroredStrategy the coordination service aborts every collective once a task has
sent no heartbeat for 10 s (TF 2.21's default), with "The following tasks are unhealthy". A frozen
process (SIGSTOP, a paused VM) then ends the attempt before multiworker's hang detection has saved
every replica's stacks and named the laggard. When the job sets ``run_policy.hang_timeout``, the
launcher passes it as ``MULTIWORKER_HANG_TIMEOUT`` and the heartbeat timeout becomes that plus
:data:`MARGIN` seconds. A replica that exits is still seen at once (by the launcher, and by its peers'
broken connections); only a frozen one waits for the hang timeout.
"""

from __future__ import annotations

import logging
import os
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["MARGIN", "heartbeat_past_hang_timeout"]

#: seconds the heartbeat timeout exceeds the hang timeout by
MARGIN = 60.0


def heartbeat_past_hang_timeout(tf: Any) -> float | None:
    """Configure the coordination service (before MultiWorkerMirroredStrategy does) with a heartbeat
    timeout past ``MULTIWORKER_HANG_TIMEOUT``; the seconds set, or None when nothing changed."""
    try:
        hang = float(os.environ.get("MULTIWORKER_HANG_TIMEOUT", ""))
    except ValueError:
        return None
    if hang <= 0:
        return None
    try:
        from tensorflow.python.distribute import collective_all_reduce_strategy as mwms
        from tensorflow.python.distribute import multi_worker_util
        from tensorflow.python.eager import context

        coordination_config_pb2 = mwms.coordination_config_pb2  # where this TensorFlow keeps it
    except (ImportError, AttributeError):  # pragma: no cover - a TensorFlow without these
        logger.warning("this TensorFlow has no coordination service to configure: peer heartbeat left as it is")
        return None
    if context.context().coordination_service is not None:  # configured already: leave it
        return None
    spec = tf.distribute.cluster_resolver.TFConfigClusterResolver().cluster_spec()
    jobs = [coordination_config_pb2.CoordinatedJob(name=job, num_tasks=spec.num_tasks(job))
            for job in ("chief", "worker") if job in spec.jobs]
    seconds = hang + MARGIN
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=multi_worker_util.coordination_leader(spec),
        coordinated_jobs=jobs, heartbeat_timeout_in_ms=int(seconds * 1000))
    logger.info("peer heartbeat timeout %.0f s (the job's hang timeout %.0f s + %.0f s)", seconds, hang, MARGIN)
    return seconds
