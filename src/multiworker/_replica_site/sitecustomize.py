"""Run in every local replica (its directory is first on the replica's PYTHONPATH; not a package).

tf-keras logs every step's loss and metrics summed over the workers under MultiWorkerMirroredStrategy
(``distribute_reduction_method`` "auto" means "sum" there, over values that are already global), so a
trainer's progress bar shows N times the true values inside an epoch (docs/environment.md). For a
model that keeps Keras's own steps and has not chosen a reduction, this makes the default "first":
the true values, as ``multiworker.trainer`` logs them. The weights are not touched.
``MULTIWORKER_KERAS_LOG_FIX=0`` turns it off. Then the ``sitecustomize`` this one shadows, if any, runs.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_TARGET = "tf_keras.src.engine.training"
_STEPS = ("train_step", "test_step", "compute_metrics", "get_metrics_result")


def _patch(training):
    """Make "first" the default reduction of a Keras-stepped model under a multi-worker strategy."""
    model_cls = training.Model
    prop = model_cls.__dict__.get("distribute_reduction_method")
    multi_worker = getattr(training, "_collective_all_reduce_multi_worker", None)
    if not isinstance(prop, property) or multi_worker is None or getattr(prop.fget, "_multiworker", False):
        return

    def fget(self):
        if (getattr(self, "_distribute_reduction_method", None) is None
                and all(getattr(type(self), name, None) is getattr(model_cls, name, None) for name in _STEPS)
                and multi_worker(self.distribute_strategy)):
            return "first"
        return prop.fget(self)

    fget._multiworker = True
    model_cls.distribute_reduction_method = property(fget, prop.fset, prop.fdel, prop.__doc__)


class _PatchingLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        try:
            _patch(module)
        except Exception:  # noqa: BLE001 - a tf-keras of another shape: its logs stay as they are
            pass

    def __getattr__(self, name):  # get_source, get_code, is_package, ...: the real loader's
        return getattr(self._inner, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname != _TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is not None and spec.loader is not None:
            spec.loader = _PatchingLoader(spec.loader)
        return spec


def _run_shadowed():
    """The sitecustomize that would have run without this one (a distribution's, a venv's)."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


if os.environ.get("MULTIWORKER_KERAS_LOG_FIX", "1") != "0" and "tf_keras" not in sys.modules:
    sys.meta_path.insert(0, _Finder())
_run_shadowed()
