"""Cats vs dogs from TFRecords: precision policy, local devices and the convnet.

The precision choices: ``float32``; ``mixed_bfloat16`` (compute in bfloat16, variables in
float32), which pays on CPUs with AVX512-BF16 or AMX and on TPUs; ``mixed_float16``, which
needs a GPU (float16 matmuls on a CPU are emulated and slow, so it is refused there).
"""

from __future__ import annotations

import logging
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

log = logging.getLogger(__name__)

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")


def check_precision(precision: str, gpus: int | None = None) -> str | None:
    """A one-line error if ``precision`` cannot run here, else None. ``gpus``: visible GPUs."""
    if precision not in PRECISIONS:
        return f"--precision {precision!r} is unknown; use one of {', '.join(PRECISIONS)}"
    if gpus is None:
        gpus = len(tf.config.list_physical_devices("GPU"))
    if precision == "mixed_float16" and gpus == 0:
        return ("--precision mixed_float16 needs a GPU and none is visible; on a CPU use "
                "--precision mixed_bfloat16 (fast with AVX512-BF16 or AMX) or float32")
    return None


def cpu_has_bf16() -> bool:
    """True when the CPU advertises bfloat16 instructions (AVX512-BF16 or AMX), on Linux."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = fh.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def split_cpu(devices: int) -> int:
    """Split the CPU into ``devices`` logical devices (before TensorFlow starts); GPUs are left as they are.

    MirroredStrategy then has several local replicas to mirror across, as on a multi-GPU host.
    Returns the number of local devices MirroredStrategy will use.
    """
    gpus = tf.config.list_physical_devices("GPU")
    if gpus:
        if devices > 1:
            log.info("--local-devices ignored: MirroredStrategy uses the %d local GPU(s)", len(gpus))
        return len(gpus)
    if devices > 1:
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * devices)
        log.info("split the CPU into %d logical devices", devices)
    return max(devices, 1)


def set_precision(precision: str) -> None:
    keras.mixed_precision.set_global_policy(precision)
    if precision == "mixed_bfloat16" and not cpu_has_bf16() and not tf.config.list_physical_devices("GPU"):
        log.warning("mixed_bfloat16 on a CPU without AVX512-BF16/AMX is emulated and usually slower")


def augment(image, label):
    return tf.image.random_flip_left_right(image), label


def build_model(size: int, num_classes: int = 2, *, lr: float = 0.001) -> keras.Model:
    """Four conv/pool blocks, flatten, dropout and a float32 softmax (stable under mixed precision)."""
    inputs = keras.Input(shape=(size, size, 3), name="image")
    x = inputs
    for filters in (32, 64, 128, 128):
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dropout(0.4)(x)
    x = keras.layers.Dense(num_classes, name="logits")(x)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(x)
    model = keras.Model(inputs, outputs, name="cats_vs_dogs")
    model.compile(optimizer=keras.optimizers.Adam(lr), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


class ClassNames(keras.layers.Layer):
    """Probabilities -> the name of the most likely class (a string tensor)."""

    def __init__(self, classes: list[str], **kwargs):
        kwargs.setdefault("dtype", "float32")
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
