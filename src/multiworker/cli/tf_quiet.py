"""TensorFlow imported without its native start-up chatter, for commands that run TensorFlow in the
CLI's own process (``serve``, ``data tfrecords``): no oneDNN banner, no "Could not find cuda drivers",
no "failed call to cuInit" on a machine without an NVIDIA driver. ``-v`` shows it all."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

__all__ = ["import_tensorflow"]


def _has_nvidia_driver() -> bool:
    return Path("/proc/driver/nvidia").exists()


def import_tensorflow(*, verbose: bool = False):
    """Import TensorFlow; unless ``verbose``, with C++ INFO/WARNING off (and its errors too where no
    NVIDIA driver exists, as the only one there is the cuInit probe) and the lines absl writes before
    its logging starts (which no level hides) dropped. A level the user set in TF_CPP_MIN_LOG_LEVEL wins."""
    if verbose or "tensorflow" in sys.modules:
        import tensorflow as tf

        return tf
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2" if _has_nvidia_driver() else "3")
    from multiworker.monitor.console import is_startup_noise

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow as tf
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines():
                if line.strip() and not is_startup_noise(line):
                    sys.stderr.write(line + "\n")
    return tf
