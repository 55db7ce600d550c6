"""The tutorials' MNIST CNN and its tf.data input pipeline."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras as keras


def build_model(learning_rate: float, decay_steps: int) -> keras.Model:
    """Conv32-Pool-Conv64-Pool-Conv64-Flatten-Dense64-Dense10, Adam with cosine decay.

    Build it inside ``strategy.scope()``; the decay runs over the whole training.
    """
    model = keras.Sequential([
        keras.layers.Input(shape=(28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10),
    ], name="mnist_cnn")
    schedule = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps, alpha=0.05)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _prepare(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.cast(images, tf.float32)[..., None] / 255.0, tf.cast(labels, tf.int64)


def datasets(path: str, global_batch_size: int, seed: int = 42) -> tuple[tf.data.Dataset, tf.data.Dataset, int]:
    """(train, test, number of training images) from a Keras-layout mnist.npz.

    Batches are global; tf.distribute shards them across workers (AutoShardPolicy.DATA). The
    shuffle seed is shared, so every worker sees the same order and takes its own slice.
    """
    with np.load(path) as data:
        x_train, y_train = data["x_train"], data["y_train"]
        x_test, y_test = data["x_test"], data["y_test"]
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    train = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train))
        .shuffle(len(x_train), seed=seed, reshuffle_each_iteration=True)
        .batch(global_batch_size)
        .map(_prepare, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )
    test = (
        tf.data.Dataset.from_tensor_slices((x_test, y_test))
        .batch(global_batch_size)
        .map(_prepare, num_parallel_calls=tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
        .with_options(options)
    )
    return train, test, len(x_train)
