"""Workarounds for TensorFlow defects that cost multi-worker training wall time, each measured.

Per-device input iterators without autotuning. Under MultiWorkerMirroredStrategy (and
MirroredStrategy) Keras feeds each device through a MultiDeviceIterator whose per-device dataset is
built with default options, so every such iterator starts a tf.data autotuning thread
(``Model::OptimizeLoop``). That thread sleeps on a timer that doubles up to 60 s, and destroying
the iterator (at the end of every epoch of a finite dataset, and when ``fit`` returns) waits for it:
in TF 2.21 the wake-up is missed, so one worker sat 20-60 s in
``RootDataset::Iterator::~Iterator`` while the others waited for it in the next collective
(seen with gdb; 2 workers, MNIST: ``fit`` took 42 or 83 s instead of 23 s in 10 of 17 runs).
The per-device dataset only forwards elements the worker's own pipeline produced (and tuned),
so it loses nothing without autotuning.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["untuned_per_device_datasets"]

_MARK = "_multiworker_untuned"


def untuned_per_device_datasets(tf: Any) -> bool:
    """Build MultiDeviceIterator's per-device datasets with autotuning off; True when applied
    (now or before), False when this TensorFlow lacks the function (nothing changed)."""
    try:
        from tensorflow.python.data.ops import multi_device_iterator_ops as mdi
    except ImportError:  # pragma: no cover - a TensorFlow without the module
        return False
    original = getattr(mdi, "_create_device_dataset", None)
    if original is None:
        logger.warning("TensorFlow %s has no _create_device_dataset: per-device autotuning left on", tf.__version__)
        return False
    if getattr(original, _MARK, False):
        return True

    def create_device_dataset(*args: Any, **kwargs: Any) -> Any:
        options = tf.data.Options()
        options.autotune.enabled = False
        return original(*args, **kwargs).with_options(options)

    setattr(create_device_dataset, _MARK, True)
    mdi._create_device_dataset = create_device_dataset
    return True
