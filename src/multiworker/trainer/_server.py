"""The tf.distribute.Server that ps replicas (and workers under ParameterServerStrategy) run.

Such a replica has no training loop of its own: the chief, as coordinator, sends it work. It
serves until it is told to stop (SIGTERM, as TFJob and Vertex AI stop replicas) or until it sees
that the job is over: the chief has written TRAINING_DONE and its port has closed. Waiting for the
port as well keeps parameter servers up while the chief still saves the model, which reads the
variables they hold. A SIGTERM after training (or once the chief is gone) exits 0: the servers
of a finished job; while the chief trains, 143 as if the signal had killed it: a preemption
mid-training is a failure for the restart policy, not a replica that finished (the job would go
on short of a worker, or wait forever without its only one).
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


def _probe(address: str, timeout: float = 1.0) -> bool | None:
    """True: something listens at ``address``; False: refused at once, nothing listens any more;
    None: not known (slow, unreachable, or not a host:port)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except ConnectionRefusedError:
        return False
    except (OSError, ValueError):
        return None


def _exit(code: int, why: str) -> NoReturn:
    logger.info("server exiting (%s)", why)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the gRPC server has no clean shutdown; skip interpreter teardown


def sigterm_exit_code(ctx: Context, started: float) -> int:
    """The exit code for a SIGTERM: 0 once the job is over (this job's TRAINING_DONE, or the chief
    gone: a trainer of its own may write no marker), else 128 + SIGTERM."""
    if training_done(ctx, since=started - 60) is not None:
        return 0
    chief = (ctx.cluster.get("chief") or [None])[0]
    return 0 if chief is not None and _probe(chief, timeout=2.0) is False else 128 + signal.SIGTERM


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
    signal.signal(signal.SIGTERM, lambda *_: _exit(sigterm_exit_code(ctx, started), "SIGTERM"))
    chief = (ctx.cluster.get("chief") or [None])[0]
    chief_seen = False
    while True:
        time.sleep(POLL_SECONDS)
        if chief is None:
            continue
        if _probe(chief):
            chief_seen = True
        elif chief_seen and training_done(ctx, since=started - 60) is not None:
            _exit(0, "training done and the chief has exited")
