"""Finding and loading the SavedModel to serve: a job's ``<output_dir>/model``, a SavedModel
directory, or TF Serving's base-path layout with numbered version subdirectories (the highest wins)."""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

import numpy as np

from multiworker.errors import UserError
from multiworker.serve.signatures import (
    BadRequest,
    SignatureInfo,
    TensorInfo,
    numpy_dtype,
)

__all__ = ["locate", "find_version", "SavedModelServable", "load"]

log = logging.getLogger(__name__)

_MARKERS = ("saved_model.pb", "saved_model.pbtxt")


def _is_saved_model(path: Path) -> bool:
    return any((path / m).is_file() for m in _MARKERS)


def find_version(base: Path) -> tuple[Path, int]:
    """(SavedModel dir, version): ``base`` itself is version 1; else its highest numbered subdirectory."""
    if _is_saved_model(base):
        return base, 1
    versions = [int(p.name) for p in base.iterdir() if p.name.isdigit() and _is_saved_model(p)] if base.is_dir() else []
    if not versions:
        raise UserError(f"{base}: no SavedModel here (saved_model.pb) nor in a numbered version subdirectory "
                        "(TF Serving's layout: <base>/1/saved_model.pb); give the directory model.save() wrote")
    return base / str(max(versions)), max(versions)


def locate(target: str, store=None) -> tuple[Path, str]:
    """(model base dir, default model name) for a SavedModel directory or a job reference (id, prefix, ``last``)."""
    path = Path(target).expanduser()
    if path.is_dir():
        return path.resolve(), path.resolve().name
    if os.sep in target or target.startswith("."):
        raise UserError(f"{target}: no such directory; give a SavedModel directory or a job id (`multiworker list`)")
    if store is None:
        from multiworker.job import Store

        store = Store()
    job = store.get_job(store.resolve(target))
    model_dir = Path(job.output_dir or "") / "model"
    if not model_dir.is_dir():
        raise UserError(f"job {job.id} ({job.state}) has no exported model at {model_dir}; the trainer "
                        "writes it with trainer.save_model() (or model.save) into AIP_MODEL_DIR when training ends")
    return model_dir, job.name


def _tensor_info(proto) -> TensorInfo:
    from tensorflow.core.framework import types_pb2

    shape = None if proto.tensor_shape.unknown_rank else tuple(d.size for d in proto.tensor_shape.dim)
    return TensorInfo(dtype=types_pb2.DataType.Name(proto.dtype), shape=shape, name=proto.name)


def _signature_infos(path: Path) -> dict[str, SignatureInfo]:
    """The serve meta graph's signature_defs, read from saved_model.pb (method names included)."""
    from tensorflow.python.saved_model import loader_impl

    saved = loader_impl.parse_saved_model(str(path))
    graphs = [g for g in saved.meta_graphs if "serve" in g.meta_info_def.tags] or list(saved.meta_graphs)
    out = {}
    for key, sig in graphs[0].signature_def.items():
        if key.startswith("__"):  # __saved_model_init_op: not callable
            continue
        out[key] = SignatureInfo(
            name=key,
            inputs={k: _tensor_info(v) for k, v in sorted(sig.inputs.items())},
            outputs={k: _tensor_info(v) for k, v in sorted(sig.outputs.items())},
            method_name=sig.method_name,
        )
    return out


class SavedModelServable:
    """One loaded SavedModel version; ``run`` is thread-safe (TensorFlow functions release the GIL)."""

    def __init__(self, path: Path, version: int):
        import tensorflow as tf

        started = time.monotonic()
        self.path = str(path)
        self.version = version
        self.signatures = _signature_infos(path)
        self._loaded = tf.saved_model.load(self.path, tags=["serve"])
        self._functions = {k: self._loaded.signatures[k] for k in self.signatures if k in self._loaded.signatures}
        self.signatures = {k: v for k, v in self.signatures.items() if k in self._functions}
        self.load_seconds = time.monotonic() - started
        log.info("loaded %s (version %d, signatures %s) in %.2fs", path, version, sorted(self.signatures),
                 self.load_seconds)

    def run(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        info = self.signatures[signature]
        try:
            tensors = {k: tf.constant(v, dtype=_tf_dtype(info.inputs[k].dtype)) for k, v in inputs.items()}
            result = self._functions[signature](**tensors)
        except (tf.errors.InvalidArgumentError, ValueError, TypeError) as exc:
            raise BadRequest(_first_line(exc)) from exc
        return {k: v.numpy() for k, v in result.items()}


def _tf_dtype(name: str):
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    numpy_dtype(name)  # BadRequest for types JSON cannot carry
    return tf.dtypes.as_dtype(types_pb2.DataType.Value(name))


def _first_line(exc: Exception) -> str:
    """The line that says what went wrong (TensorFlow's graph errors bury it under node traces)."""
    message = getattr(exc, "message", None) or str(exc)
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    useful = [line for line in lines if not line.startswith(("Graph execution error", "Detected at node", "File ",
                                                             "[[", "Traceback")) and "defined at" not in line]
    if not lines:
        return type(exc).__name__
    return re.sub(r"\s*\[Op:[^\]]*\]$", "", useful[-1] if useful else lines[0])


def load(base: Path) -> SavedModelServable:
    """Load the version to serve from ``base``; a UserError (not a traceback) when it is not a SavedModel."""
    try:
        import tensorflow  # noqa: F401
    except ImportError as exc:
        raise UserError("serving needs TensorFlow: `pip install 'multiworker[tensorflow,serve]'`") from exc
    path, version = find_version(base)
    try:
        return SavedModelServable(path, version)
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot load the SavedModel: {_first_line(exc)}") from exc
