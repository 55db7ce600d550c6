"""Choosing the tf.distribute strategy from the cluster, once per process.

- ps in the cluster: ParameterServerStrategy on the chief (the coordinator, with a
  ClusterCoordinator); worker and ps replicas run a tf.distribute.Server and never return;
- several chief/worker tasks: MultiWorkerMirroredStrategy;
- several local GPUs, or several logical CPUs the user configured: MirroredStrategy;
- otherwise (and always on an evaluator): the default strategy.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from multiworker.trainer import _env
from multiworker.trainer._context import Context, context
from multiworker.trainer._heartbeat import heartbeat_past_hang_timeout
from multiworker.trainer._leader import leader_address, wait_for_leader
from multiworker.trainer._markers import clear_training_done
from multiworker.trainer._server import serve_forever
from multiworker.trainer._tf_workarounds import (
    sigterm_stops_again,
    untuned_per_device_datasets,
)
from multiworker.trainer._threads import configure_threads

logger = logging.getLogger(__name__)

__all__ = ["cluster_coordinator", "fit_kwargs", "serve_if_needed", "strategy", "strategy_kind"]

_lock = threading.Lock()
_strategy: Any = None


def _local_devices(tf: Any) -> tuple[int, int]:
    """(physical GPUs, logical CPUs the user configured) without initializing the runtime."""
    gpus = len(tf.config.list_physical_devices("GPU"))
    cpus = tf.config.list_physical_devices("CPU")
    logical = tf.config.get_logical_device_configuration(cpus[0]) if cpus else None
    return gpus, max(len(logical or ()), 1)


def strategy_kind(ctx: Context | None = None, *, local_gpus: int = 0, local_cpus: int = 1) -> str:
    """Which strategy a replica gets: "server", "parameter_server", "multi_worker_mirrored",
    "mirrored" or "default". Pure: the device counts are passed in."""
    ctx = ctx or context()
    if ctx.is_evaluator:
        return "default"
    if ctx.runs_server_only:
        return "server"
    if ctx.has_ps:
        return "parameter_server"
    if ctx.num_workers > 1:
        return "multi_worker_mirrored"
    if local_gpus > 1 or (local_gpus == 0 and local_cpus > 1):
        return "mirrored"
    return "default"


def _create(ctx: Context) -> Any:
    import tensorflow as tf

    gpus, cpus = _local_devices(tf)
    kind = strategy_kind(ctx, local_gpus=gpus, local_cpus=cpus)
    if ctx.is_chief:
        clear_training_done(ctx)
    if kind == "parameter_server":
        resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
        created = tf.distribute.ParameterServerStrategy(resolver)
        tf.distribute.coordinator.ClusterCoordinator(created)
    elif kind == "multi_worker_mirrored":
        untuned_per_device_datasets(tf)
        _wait_for_leader(ctx)
        heartbeat_past_hang_timeout(tf)
        created = tf.distribute.MultiWorkerMirroredStrategy()
    elif kind == "mirrored":
        untuned_per_device_datasets(tf)
        created = tf.distribute.MirroredStrategy(None if gpus else [f"/cpu:{i}" for i in range(cpus)])
    else:
        created = tf.distribute.get_strategy()
    sigterm_stops_again()
    logger.info("%s: %s strategy, %d replica(s) in sync", ctx.name, kind, created.num_replicas_in_sync)
    return created


def _wait_for_leader(ctx: Context) -> None:
    """On a non-leader, wait for the coordination leader's server (see :mod:`._leader`)."""
    address = None if ctx.is_chief else leader_address(ctx.cluster)
    if address:
        waited = wait_for_leader(address)
        if waited is not None and waited >= 1.0:
            logger.info("%s: waited %.1f s for the coordination leader at %s", ctx.name, waited, address)


def strategy(ctx: Context | None = None) -> Any:
    """The process's strategy, created on first call (call it before building anything in TF).

    On ps replicas, and on workers when the cluster has ps, this serves the cluster and never
    returns, so a plain trainer gains parameter servers by configuration alone.
    """
    global _strategy
    with _lock:
        if _strategy is None:
            ctx = ctx or context()
            configure_threads()
            _env.export_normalized_tf_config()
            serve_if_needed(ctx)
            _strategy = _create(ctx)
        return _strategy


def cluster_coordinator() -> Any:
    """The ClusterCoordinator of this chief's ParameterServerStrategy (None under other strategies)."""
    import tensorflow as tf

    current = strategy()
    if not isinstance(current, tf.distribute.ParameterServerStrategy):
        return None
    return tf.distribute.coordinator.ClusterCoordinator(current)  # a singleton per strategy


def serve_if_needed(ctx: Context | None = None) -> None:
    """On a ps replica, or a worker under ParameterServerStrategy, serve and exit; else return.

    The server exits 0 on SIGTERM, and by itself once the chief has written TRAINING_DONE and
    gone away (see :mod:`multiworker.trainer._server`).
    """
    ctx = ctx or context()
    if ctx.runs_server_only:
        configure_threads()
        _env.export_normalized_tf_config()
        serve_forever(ctx)


def fit_kwargs(data: Any, *, steps_per_epoch: int | None = None) -> dict[str, Any]:
    """``x`` and ``steps_per_epoch`` for ``model.fit`` that work under every strategy.

    ``data`` is a tf.data.Dataset batched with the global batch size, or a function
    ``fn(input_context) -> Dataset`` (wrapped in a DatasetCreator, which needs steps_per_epoch).
    ParameterServerStrategy needs an endless dataset and a step count: a finite dataset is
    repeated and, without steps_per_epoch, one epoch is one pass over it. Elsewhere a dataset
    is repeated only when steps_per_epoch is given and differs from its length, so short
    epochs never run out of data.
    """
    import tensorflow as tf
    import tf_keras as keras

    is_pss = isinstance(strategy(), tf.distribute.ParameterServerStrategy)
    if callable(data) and not isinstance(data, tf.data.Dataset):
        if steps_per_epoch is None:
            raise ValueError("a dataset function needs steps_per_epoch; pass steps_per_epoch=N")
        return {"x": keras.utils.experimental.DatasetCreator(data), "steps_per_epoch": steps_per_epoch}
    if not isinstance(data, tf.data.Dataset):
        return {"x": data, "steps_per_epoch": steps_per_epoch}
    length = int(data.cardinality())
    finite = length >= 0  # INFINITE is -1, UNKNOWN is -2
    if is_pss and steps_per_epoch is None:
        if not finite or length == 0:
            raise ValueError(
                "ParameterServerStrategy needs steps_per_epoch for a dataset of unknown or "
                "infinite length; pass steps_per_epoch=N")
        steps_per_epoch = length
    if finite and steps_per_epoch is not None and (is_pss or steps_per_epoch != length):
        data = data.repeat()
    return {"x": data, "steps_per_epoch": steps_per_epoch}
