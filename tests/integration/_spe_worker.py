"""One worker of test_steps_per_execution_workers: trainer.fit with steps_per_execution "auto".

``--hooks-on 0`` gives worker 0 alone a callback with batch hooks (as a chief-only callback would
be): every worker must then keep one step a call, or their collectives would not pair up. Prints
one JSON line: the steps per call the worker logged, the steps its callback saw, its weights.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys

os.environ["TF_USE_LEGACY_KERAS"] = "1"

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from multiworker import trainer  # noqa: E402

INDEX = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
HOOKS_ON = int(sys.argv[sys.argv.index("--hooks-on") + 1]) if "--hooks-on" in sys.argv else None


class Chosen(logging.Handler):
    def __init__(self):
        super().__init__()
        self.values: list[int] = []

    def emit(self, record):
        match = re.match(r"(\d+) steps per execution", record.getMessage())
        if match:
            self.values.append(int(match.group(1)))


class Counter(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.ends: list[int] = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(batch)


def data(context: tf.distribute.InputContext) -> tf.data.Dataset:
    rng = np.random.RandomState(context.input_pipeline_id)
    x = rng.rand(256, 4).astype("float32")
    y = (x.sum(axis=1) > 2).astype("float32")
    return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(8)


chosen = Chosen()
logging.getLogger("multiworker.trainer._execution").addHandler(chosen)
logging.getLogger("multiworker.trainer._execution").setLevel(logging.INFO)
tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
strategy = trainer.strategy()
keras.utils.set_random_seed(5)
with strategy.scope():
    model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="binary_crossentropy", metrics=["accuracy"])
counter = Counter()
trainer.fit(model, data, epochs=2, steps_per_epoch=30, global_batch_size=16, verbose=0,
            callbacks=[counter] if INDEX == HOOKS_ON else None)
print(json.dumps({"index": INDEX, "chosen": chosen.values, "ends": counter.ends,
                  "weights": [w.tolist() for w in model.get_weights()]}), flush=True)
