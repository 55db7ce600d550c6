"""Flower photos CNN: input from a class-folder tree or its TFRecords, a small convnet.

Images reach the model as float32 in [0, 1], shape (size, size, 3); the exported model adds
the class names so a prediction can say "tulips" rather than 4.
"""

from __future__ import annotations

import logging
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

log = logging.getLogger(__name__)

CLASSES = ["daisy", "dandelion", "roses", "sunflowers", "tulips"]


def is_tfrecords(path: str) -> bool:
    """True when ``path`` is a conversion folder (has manifest.json) or a TFRecord glob."""
    return path.endswith(".tfrecord") or "*" in path or tf.io.gfile.exists(path.rstrip("/") + "/manifest.json")


def load_dataset(path: str, size: int, *, split: str = "train", val_split: float = 0.2, seed: int = 0):
    """(dataset of (image, label), class names) for ``split`` of a folder tree or TFRecords.

    A folder tree is split per class with ``val_split`` and ``seed`` the same way
    ``multiworker data tfrecords`` splits it; TFRecords carry their split in the shard names.
    """
    from multiworker.data import load_manifest, read_image_folder, read_tfrecords, shard_pattern

    if path.endswith(".tfrecord") or "*" in path:
        return read_tfrecords(path, size), CLASSES
    if is_tfrecords(path):
        return read_tfrecords(shard_pattern(path, split), size), load_manifest(path)["classes"]
    return read_image_folder(path, size, split=split, val_split=val_split, seed=seed)


def class_counts(path: str, split: str, *, val_split: float = 0.2, seed: int = 0) -> list[int] | None:
    """Images per class in ``split`` without reading them (manifest or file listing); None if unknown."""
    from multiworker.data import list_image_folder, load_manifest, split_files

    if path.endswith(".tfrecord") or "*" in path:
        return None
    if is_tfrecords(path):
        manifest = load_manifest(path)
        per_class = manifest.get("counts_per_class", {}).get(split)
        return [per_class.get(c, 0) for c in manifest["classes"]] if per_class else None
    classes, files = list_image_folder(path)
    train, val = split_files(files, val_split, seed)
    chosen = train if split == "train" else val
    return [sum(1 for f in chosen if f.label == i) for i in range(len(classes))]


def baselines(train_counts: list[int] | None, val_counts: list[int] | None) -> dict:
    """Accuracy of guessing (chance) and of always answering the training majority class."""
    if not val_counts or not sum(val_counts):
        return {}
    out = {"chance_accuracy": round(1.0 / len(val_counts), 4)}
    if train_counts:
        majority = max(range(len(train_counts)), key=train_counts.__getitem__)
        out["majority_accuracy"] = round(val_counts[majority] / sum(val_counts), 4)
    return out


def augment(image, label):
    """Cheap per-epoch augmentation (flip, brightness) on top of any stored copies."""
    image = tf.image.random_flip_left_right(image)
    image = tf.clip_by_value(tf.image.random_brightness(image, 0.1), 0.0, 1.0)
    return image, label


def build_model(size: int, num_classes: int, *, lr: float = 0.002) -> keras.Model:
    """Four conv blocks, global pooling, dropout, softmax."""
    inputs = keras.Input(shape=(size, size, 3), name="image")
    x = inputs
    for filters in (16, 32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, padding="same", use_bias=False)(x)
        x = keras.layers.BatchNormalization()(x)
        x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = keras.layers.Dropout(0.3)(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32", name="probabilities")(x)
    model = keras.Model(inputs, outputs, name="flowers_cnn")
    model.compile(optimizer=keras.optimizers.Adam(lr), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


class ClassNames(keras.layers.Layer):
    """Probabilities -> the name of the most likely class (a string tensor)."""

    def __init__(self, classes: list[str], **kwargs):
        super().__init__(**kwargs)
        self.classes = list(classes)

    def call(self, probabilities):
        return tf.gather(tf.constant(self.classes), tf.argmax(probabilities, axis=-1))

    def get_config(self):
        return {**super().get_config(), "classes": self.classes}


def with_class_names(model: keras.Model, classes: list[str]) -> keras.Model:
    """The serving model: ``probabilities`` plus the predicted ``class_name``."""
    probs = model.output
    names = ClassNames(classes, name="class_name")(probs)
    return keras.Model(model.input, {"probabilities": probs, "class_name": names}, name=model.name)
