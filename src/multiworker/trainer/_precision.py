"""``set_precision("auto")``: mixed_bfloat16 where the CPU computes bf16 natively, float32 otherwise.

bf16 halves the bytes moved and, on CPUs with AVX512-BF16 or AMX, speeds up convolutions and
matrix products (1.75x measured for the cats-vs-dogs CNN, see BENCHMARKS.md); elsewhere it is
emulated and slower, hence "auto". GPUs are left to the user ("mixed_float16" or "mixed_bfloat16").
"""

from __future__ import annotations

import logging
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["BF16_FLAGS", "PRECISIONS", "choose_precision", "cpu_flags", "set_precision"]

#: /proc/cpuinfo flags meaning native bf16 arithmetic.
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
PRECISIONS = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The CPU feature flags of the first processor in /proc/cpuinfo (empty where there is none)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def choose_precision(precision: str, flags: set[str]) -> str:
    """The Keras policy name for ``precision`` ("auto" resolved against the CPU ``flags``)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r}: expected one of {', '.join(PRECISIONS)}")
    if precision != "auto":
        return precision
    return "mixed_bfloat16" if flags & set(BF16_FLAGS) else "float32"


def set_precision(precision: str = "auto") -> str:
    """Set tf-keras' global dtype policy (before building the model); returns the policy chosen.

    Keep the last layer in float32 (``dtype="float32"``) so the loss is computed in float32.
    """
    import tf_keras as keras

    policy = choose_precision(precision, cpu_flags())
    keras.mixed_precision.set_global_policy(policy)
    logger.info("precision: %s (asked: %s)", policy, precision)
    return policy
