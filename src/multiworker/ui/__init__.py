"""``multiworker ui``: a local web dashboard over the job store (jobs, one job, compare).

Starlette + uvicorn + Jinja2 (the ``ui`` extra), charts drawn by uPlot vendored under
``static/vendor`` so the pages work offline. Everything is read from the same SQLite store and log
files the terminal commands read; only the cancel and delete actions write.
Imports of the web stack stay inside :mod:`multiworker.ui.app` and :mod:`multiworker.ui.server`.
"""

from __future__ import annotations

__all__ = ["EXTRA_HINT", "missing_dependencies"]

EXTRA_HINT = "pip install 'multiworker[ui]'"


def missing_dependencies() -> list[str]:
    """The dashboard's third-party packages that are not installed."""
    import importlib.util

    return [name for name in ("starlette", "uvicorn", "jinja2") if importlib.util.find_spec(name) is None]
