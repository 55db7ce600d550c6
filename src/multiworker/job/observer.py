"""What the group controller tells whoever watches it: replica lines, metrics, events, the end."""

from __future__ import annotations

__all__ = ["Observer", "NullObserver"]


class Observer:
    """Callbacks from the group controller; every method is optional."""

    def on_line(self, replica: str, line: str) -> None: ...

    def on_metric(self, replica: str, metric: dict, *, primary: bool) -> None: ...

    def on_event(self, reason: str, message: str, *, replica: str | None, warning: bool) -> None: ...

    def on_samples(self, rows: list[tuple[str, float, int]]) -> None: ...

    def on_finish(self, state: str, message: str) -> None: ...


class NullObserver(Observer):
    """Watches nothing (detached runs: everything is in the store and the logs)."""
