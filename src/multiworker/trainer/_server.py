"""The tf.distribute.Server that ps replicas (and workers under ParameterServerStrategy) run.

Such a replica has no training loop of its own: the chief, as coordinator, sends it work. It
serves until it is told to stop (SIGTERM, as TFJob and Vertex AI stop replicas; exit code 0)
or until it sees that the job is over: the chief has written TRAINING_DONE and its port has
closed. Waiting for the port as well keeps parameter servers up while the chief still saves the
model, which reads the variables they hold.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from typing import NoReturn

from multiworker.trainer._context import Context
from multiworker.trainer._markers import training_done
from multiworker.trainer._threads import configure_threads

logger = logging.getLogger(__name__)

POLL_SECONDS = 2.0


def _port_open(address: str, timeout: float = 1.0) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def _exit(code: int, why: str) -> NoReturn:
    logger.info("server exiting (%s)", why)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the gRPC server has no clean shutdown; skip interpreter teardown


def serve_forever(ctx: Context) -> NoReturn:
    """Start this replica's server and block until the job is over; never returns."""
    import tensorflow as tf

    started = time.time()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    intra, inter = configure_threads()
    config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra or 0,
                                      inter_op_parallelism_threads=max(inter or 0, 2) if inter else 0)
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=ctx.task_type,
                                  task_index=ctx.task_index, protocol=resolver.rpc_layer or "grpc",
                                  config=config, start=True)
    logger.info("%s serving at %s", ctx.name, server.target)
    signal.signal(signal.SIGTERM, lambda *_: _exit(0, "SIGTERM"))
    chief = (ctx.cluster.get("chief") or [None])[0]
    chief_seen = False
    while True:
        time.sleep(POLL_SECONDS)
        if chief is None:
            continue
        if _port_open(chief):
            chief_seen = True
        elif chief_seen and training_done(ctx, since=started - 60) is not None:
            _exit(0, "training done and the chief has exited")
