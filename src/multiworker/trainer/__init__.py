"""The library a trainer imports inside each replica: role, strategy, callbacks, saving, evaluation.

It reads only the environment the cloud gives replicas (TF_CONFIG, AIP_*, and the optional
MULTIWORKER_* variables), so a trainer written against it runs unchanged under
``multiworker run``, Kubeflow TFJob and Vertex AI. TensorFlow is imported when first needed.

A trainer, in full::

    from multiworker import trainer

    strategy = trainer.strategy()             # ps / PSS workers serve here and never return
    with strategy.scope():
        model = build_and_compile()
    trainer.fit(model, train_ds, epochs=5, global_batch_size=gbs, eval_data=test_ds)
    trainer.save_model(model)                 # every replica calls it; the chief writes
    trainer.write_metrics_json({"test_accuracy": acc})
"""

from __future__ import annotations

from typing import Any

from multiworker.trainer._backup_policy import parse_backup_every
from multiworker.trainer._callbacks import callbacks
from multiworker.trainer._context import Context, context
from multiworker.trainer._evaluator import run_evaluator
from multiworker.trainer._fit import fit
from multiworker.trainer._markers import (
    done_marker_path,
    mark_training_done,
    training_done,
)
from multiworker.trainer._precision import set_precision
from multiworker.trainer._report import emit
from multiworker.trainer._saving import save_model, write_metrics_json
from multiworker.trainer._strategy import (
    cluster_coordinator,
    fit_kwargs,
    serve_if_needed,
    strategy,
    strategy_kind,
)
from multiworker.trainer._threads import configure_threads

__all__ = [
    "Context",
    "EpochCheckpoint",
    "MetricsReporter",
    "callbacks",
    "cluster_coordinator",
    "configure_threads",
    "context",
    "done_marker_path",
    "emit",
    "fit",
    "fit_kwargs",
    "mark_training_done",
    "parse_backup_every",
    "parse_steps_per_execution",
    "run_evaluator",
    "save_model",
    "serve_if_needed",
    "set_precision",
    "strategy",
    "strategy_kind",
    "training_done",
    "write_metrics_json",
]

#: Names whose modules import tf_keras: imported only when asked for.
_LAZY = {"EpochCheckpoint": "_keras_callbacks", "MetricsReporter": "_keras_callbacks",
         "parse_steps_per_execution": "_execution"}


def __getattr__(name: str) -> Any:
    """Keras callback classes and the steps-per-execution parser, imported (with tf_keras) only
    when asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"multiworker.trainer.{_LAZY[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
