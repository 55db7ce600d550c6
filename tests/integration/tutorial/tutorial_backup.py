"""TensorFlow's multi-worker Keras tutorial, as users copy it: MultiWorkerMirroredStrategy, the
MNIST CNN, ``BackupAndRestore`` saving every ``--save-freq`` steps, Keras's progress bar; nothing
from multiworker. Used by the preemption tests and benchmark. ``--step-seconds`` stands for a bigger
model: each step takes at least that long, so a notice of N seconds covers a bounded number of steps
on any machine."""

import argparse
import json
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--data", required=True)
parser.add_argument("--steps", type=int, default=200)
parser.add_argument("--save-freq", type=int, default=50)
parser.add_argument("--backup-dir", required=True)
parser.add_argument("--step-seconds", type=float, default=0.0)
args = parser.parse_args()


def mnist_dataset(batch_size):
    with np.load(args.data) as data:
        x_train, y_train = data["x_train"], data["y_train"]
    x_train = x_train / np.float32(255)
    y_train = y_train.astype(np.int64)
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000).repeat().batch(batch_size)


def build_and_compile_cnn_model():
    model = keras.Sequential([
        keras.layers.InputLayer(input_shape=(28, 28)),
        keras.layers.Reshape(target_shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=keras.optimizers.SGD(learning_rate=0.001), metrics=["accuracy"])
    return model


strategy = tf.distribute.MultiWorkerMirroredStrategy()
num_workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
global_batch_size = 64 * num_workers
dataset = mnist_dataset(global_batch_size)
with strategy.scope():
    model = build_and_compile_cnn_model()
callbacks = [keras.callbacks.BackupAndRestore(backup_dir=args.backup_dir, save_freq=args.save_freq)]
if args.step_seconds:
    callbacks.append(keras.callbacks.LambdaCallback(on_train_batch_end=lambda *_: time.sleep(args.step_seconds)))
model.fit(dataset, epochs=1, steps_per_epoch=args.steps, callbacks=callbacks)
