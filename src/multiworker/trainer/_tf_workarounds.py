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

SIGTERM that stops nothing. Creating MultiWorkerMirroredStrategy (TF 2.21) starts the coordination
service, whose preemption notifier installs a native SIGTERM handler that only logs "SIGTERM
caught" (it serves ``PreemptionCheckpointHandler``): the worker trains on, so stopping a job
(Ctrl-C, ``multiworker cancel``, a group restart, Kubernetes deleting a pod) waited out the whole
grace period before SIGKILL (10.25 s for a Ctrl-C of the mnist example, measured). Python still
reports SIG_DFL, so the default is put back explicitly; a PreemptionCheckpointHandler (or tf-keras's
``save_before_preemption``) created afterwards installs its own handler over it, as it would have.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["sigterm_stops_again", "untuned_per_device_datasets"]

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


def sigterm_stops_again() -> bool:
    """Give SIGTERM its default action back (terminate) where Python sees no handler of its own;
    True when reset. Only the main thread may set handlers: elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:  # a Python handler: the user's choice
        return False
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # replaces a native handler Python cannot see
    return True
