"""The tuning metric, reported the way ``cloudml-hypertune`` does, and the mean-fare baseline.

Each report is one JSON line in CLOUD_ML_HP_METRIC_FILE (default /tmp/hypertune/output.metrics):
``{"global_step": "500", "rmse": "4.21", "timestamp": 1700000000.0, "trial": "0"}`` (values as
strings, keys sorted), which Vertex AI's tuning service reads. Lines are appended, so a
restarted replica keeps the reports of earlier attempts.
"""

from __future__ import annotations

import csv
import io
import json
import logging
import math
import os
import time

import tensorflow as tf
import tf_keras as keras

log = logging.getLogger(__name__)

DEFAULT_METRIC_FILE = "/tmp/hypertune/output.metrics"


def metric_file() -> str:
    return os.environ.get("CLOUD_ML_HP_METRIC_FILE") or DEFAULT_METRIC_FILE


def report(tag: str, value: float, global_step: int | None = None) -> dict:
    """Append one hypertune metric line; returns the record written."""
    record = {
        "timestamp": time.time(),
        "trial": str(os.environ.get("CLOUD_ML_TRIAL_ID", 0)),
        tag: str(float(value)),
        "global_step": str(int(global_step) if global_step else 0),
    }
    path = metric_file()
    directory = os.path.dirname(path)
    if directory:
        os.makedirs(directory, exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
    log.info("hypertune %s=%s at step %s -> %s", tag, record[tag], record["global_step"], path)
    return record


class HypertuneReporter(keras.callbacks.Callback):
    """After each epoch, report ``val_<tag>`` (the evaluation's value) as the tuning metric."""

    def __init__(self, tag: str, steps_per_epoch: int):
        super().__init__()
        self.tag = tag
        self.steps_per_epoch = steps_per_epoch

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(f"val_{self.tag}")
        if value is None:
            log.warning("no val_%s in this epoch's logs; nothing reported to hypertune", self.tag)
            return
        report(self.tag, float(value), (epoch + 1) * self.steps_per_epoch)


def _fares(pattern: str, limit: int = 1_000_000) -> list[float]:
    fares: list[float] = []
    for path in sorted(tf.io.gfile.glob(pattern)):
        with tf.io.gfile.GFile(path) as fh:
            for row in csv.reader(io.StringIO(fh.read())):
                if row:
                    fares.append(float(row[0]))
                if len(fares) >= limit:
                    return fares
    return fares


def mean_baseline(train_pattern: str, eval_pattern: str) -> dict:
    """RMSE on the evaluation data of always predicting the training mean fare."""
    train, evaluation = _fares(train_pattern), _fares(eval_pattern)
    if not train or not evaluation:
        return {}
    mean = sum(train) / len(train)
    rmse = math.sqrt(sum((f - mean) ** 2 for f in evaluation) / len(evaluation))
    return {"baseline_rmse": round(rmse, 4), "baseline_mean_fare": round(mean, 4)}
