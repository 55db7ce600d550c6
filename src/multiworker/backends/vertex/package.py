"""Source distributions for ``pythonPackageSpec``: the trainer's working directory (its own build
backend; a minimal setuptools project generated in a temporary copy when it has none) and, when the
trainer imports ``multiworker``, multiworker's replica-side runtime (``multiworker.trainer``)."""

from __future__ import annotations

import logging
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

from multiworker.errors import UserError

__all__ = ["build_sdist", "trainer_sdist", "runtime_sdist", "imports_multiworker"]

log = logging.getLogger(__name__)

_IMPORT = re.compile(r"^\s*(?:from|import)\s+multiworker\b", re.M)
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", ".*", "*.egg-info", "build", "dist")


def build_sdist(source: Path, outdir: Path) -> Path:
    """``python -m build --sdist --no-isolation`` through build's API: the backend this interpreter has."""
    from build import BuildBackendException, BuildException, ProjectBuilder
    from pyproject_hooks import quiet_subprocess_runner

    builder = ProjectBuilder(source, python_executable=sys.executable, runner=quiet_subprocess_runner)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. setuptools' "[tool.setuptools] is beta", re-raised by build
            missing = sorted(str(next(iter(m))) for m in builder.check_dependencies("sdist"))
            if missing:
                raise UserError(f"{source}: building its sdist needs {', '.join(missing)}; pip install them here")
            return Path(builder.build("sdist", outdir))
    except (BuildException, BuildBackendException) as exc:
        cause = exc.exception if isinstance(exc, BuildBackendException) else exc
        raise UserError(f"{source}: the sdist build failed ({cause}); try `python -m build --sdist` there") from exc


def _has_project(directory: Path) -> bool:
    return (directory / "pyproject.toml").is_file() or (directory / "setup.py").is_file()


def _minimal_project(source: Path, dest: Path, *, name: str, module: str) -> None:
    """Copy the top-level packages and modules of ``source`` and add a setuptools pyproject.toml."""
    top = module.split(".")[0]
    packages = sorted(p.name for p in source.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    modules = sorted(p.stem for p in source.glob("*.py") if p.stem != "setup")
    if top not in packages and top not in modules:
        raise UserError(f"{source}: has no package or module {top!r} for `module: {module}`; set working_dir "
                        "to the directory that holds it")
    for package in packages:
        shutil.copytree(source / package, dest / package, ignore=_SKIP)
    for mod in modules:
        shutil.copy2(source / f"{mod}.py", dest / f"{mod}.py")
    listed = ", ".join(f'"{p}"' for p in packages)
    mods = ", ".join(f'"{m}"' for m in modules)
    (dest / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{name}"\nversion = "0.0.0"\n\n'
        f"[tool.setuptools]\npackages = [{listed}]\npy-modules = [{mods}]\n")


def trainer_sdist(source: Path, outdir: Path, *, name: str, module: str) -> tuple[Path, bool]:
    """The sdist of the trainer in ``source``; True when a pyproject.toml was generated for it."""
    if not source.is_dir():
        raise UserError(f"working_dir: {source} is not a directory; point it at the trainer's project")
    if _has_project(source):
        return build_sdist(source, outdir), False
    with tempfile.TemporaryDirectory(prefix="mw-sdist-") as tmp:
        _minimal_project(source, Path(tmp), name=re.sub(r"[^A-Za-z0-9.]+", "-", name) + "-trainer", module=module)
        return build_sdist(Path(tmp), outdir), True


def imports_multiworker(source: Path) -> bool:
    """Whether any Python file of the trainer imports multiworker (then it needs the runtime package)."""
    for path in source.rglob("*.py"):
        if any(part.startswith(".") or part in ("build", "dist") for part in path.relative_to(source).parts):
            continue
        try:
            if _IMPORT.search(path.read_text(encoding="utf-8", errors="replace")):
                return True
        except OSError:
            continue
    return False


def runtime_sdist(outdir: Path, *, tf_minor: int | None) -> Path:
    """An sdist named ``multiworker`` holding only what replicas import (``multiworker.trainer`` and
    ``metrics_line``), with tf-keras matching the executor image's TensorFlow when that is known."""
    import multiworker

    root = Path(multiworker.__file__).resolve().parent
    with tempfile.TemporaryDirectory(prefix="mw-runtime-") as tmp:
        dest = Path(tmp) / "multiworker"
        shutil.copytree(root / "trainer", dest / "trainer", ignore=_SKIP)
        for name in ("__init__.py", "metrics_line.py"):
            shutil.copy2(root / name, dest / name)
        deps = f'["tf-keras==2.{tf_minor}.*"]' if tf_minor else "[]"
        (Path(tmp) / "pyproject.toml").write_text(
            '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
            f'[project]\nname = "multiworker"\nversion = "{multiworker.__version__}"\ndependencies = {deps}\n\n'
            '[tool.setuptools]\npackages = ["multiworker", "multiworker.trainer"]\n')
        return build_sdist(Path(tmp), outdir)
