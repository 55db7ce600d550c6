"""One worker of test_fused_step: the same model trained with Keras's step and with the fused one.

Keras's step runs twice: with its default log reduction ("auto", a sum over workers) and with
"first", which trainer.fit sets. Prints one JSON line: each model's per-step logs, final weights and evaluation, and whether the
fused step was installed. Each worker reads different data, so an unsummed gradient or metric
shows as a difference between the models or between the workers.
"""

from __future__ import annotations

import json
import os
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from multiworker.trainer._metric_sync import sync_step_metrics  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
strategy = tf.distribute.MultiWorkerMirroredStrategy()
SPARSE = "--sparse" in sys.argv[1:]


def data(context: tf.distribute.InputContext) -> tf.data.Dataset:
    rng = np.random.RandomState(context.input_pipeline_id)
    x = rng.randint(0, 20, size=(64, 4)) if SPARSE else rng.rand(64, 4).astype("float32")
    y = (rng.rand(64) > 0.5).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)


def train(fused: bool, reduction: str | None = None) -> dict:
    keras.utils.set_random_seed(5)
    with strategy.scope():
        inputs = keras.layers.Input(shape=(4,), dtype="int32" if SPARSE else "float32")
        hidden = keras.layers.Flatten()(keras.layers.Embedding(20, 3)(inputs)) if SPARSE else inputs
        model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(keras.layers.Dense(8)(hidden)))
        model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9), loss="binary_crossentropy",
                      metrics=["accuracy", keras.metrics.MeanSquaredError(name="mse"), keras.metrics.AUC(name="auc")])
    if reduction:
        model.distribute_reduction_method = reduction
    installed = sync_step_metrics(model) if fused else False
    steps: list[dict] = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: steps.append({k: float(v) for k, v in logs.items()}))
    model.fit(strategy.distribute_datasets_from_function(data), epochs=2, steps_per_epoch=4, verbose=0,
              callbacks=[record])
    return {"installed": installed, "fused_step": "train_step" in vars(model), "steps": steps,
            "weights": [w.tolist() for w in model.get_weights()]}


print(json.dumps({"keras_default": train(fused=False), "keras": train(fused=False, reduction="first"),
                  "fused": train(fused=True)}), flush=True)
