"""The tutorials' MNIST CNN and its tf.data input pipeline."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tensorflow as tf
import tf_keras as keras


def one_cycle(peak: float, total_steps: int, warmup: float = 0.2) -> keras.optimizers.schedules.LearningRateSchedule:
    """Warm up linearly from peak/10 to ``peak`` over the first 20% of ``total_steps``, then
    cosine-decay to peak/50: reaches 99% on MNIST in 2 epochs. Keras's own CosineDecay with warm-up,
    so a saved model loads with ``keras.models.load_model`` and no custom objects."""
    warm = max(1, int(warmup * total_steps))
    return keras.optimizers.schedules.CosineDecay(peak / 10, max(1, total_steps - warm), alpha=0.02,
                                                  warmup_target=peak, warmup_steps=warm)


def build_model(learning_rate: float, decay_steps: int, schedule: str = "cosine") -> keras.Model:
    """Conv32-Pool-Conv64-Pool-Conv64-Flatten-Dense64-Dense10 (the tutorials' CNN), Adam with cosine
    decay from ``learning_rate`` (the measured demo recipe), or a one-cycle schedule peaking at it.

    Build it inside ``strategy.scope()``; the schedule runs over the whole training
    (``decay_steps``). The last layer computes in float32 under a mixed precision policy.
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
        keras.layers.Dense(10, dtype="float32"),
    ], name="mnist_cnn")
    if schedule == "onecycle":
        rate = one_cycle(learning_rate, decay_steps)
    else:
        rate = keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps, alpha=0.05)
    model.compile(
        optimizer=keras.optimizers.Adam(rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _prepare(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.cast(images, tf.float32)[..., None] / 255.0, tf.cast(labels, tf.int64)


def datasets(path: str, global_batch_size: int, seed: int = 42) -> tuple[Callable, tf.data.Dataset, int]:
    """(train, test, number of training images) from a Keras-layout mnist.npz.

    ``train`` is a dataset function, ``fn(input_context) -> Dataset`` (the tutorials'
    ``distribute_datasets_from_function`` pattern): each worker reads, shuffles and batches only
    its own shard of the images, with the per-worker batch size. Batching the global batch and
    letting tf.distribute shard it (AutoShardPolicy.DATA) makes every worker prepare every image
    and keep half: 9 ms a step at 256 images per worker (BENCHMARKS.md). It repeats: an epoch is
    ``steps_per_epoch`` steps. ``test`` is batched globally and sharded by tf.distribute, for
    ``evaluate``.
    """
    with np.load(path) as data:
        x_train, y_train = data["x_train"], data["y_train"]
        x_test, y_test = data["x_test"], data["y_test"]
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # No tf.data autotuning thread: destroying its iterator at an epoch's end (or evaluate's) waited
    # 20-60 s for that thread under MultiWorkerMirroredStrategy (BENCHMARKS.md); AUTOTUNE below then
    # means the replica's cores.
    options.autotune.enabled = False

    def train(input_context: tf.distribute.InputContext) -> tf.data.Dataset:
        shards, shard = input_context.num_input_pipelines, input_context.input_pipeline_id
        return (
            tf.data.Dataset.from_tensor_slices((x_train, y_train))
            .shard(shards, shard)
            .shuffle(-(-len(x_train) // shards), seed=seed, reshuffle_each_iteration=True)
            .repeat()
            .batch(input_context.get_per_replica_batch_size(global_batch_size))
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
