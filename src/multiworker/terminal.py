"""Text from replicas made safe for a terminal: escape sequences (colours, cursor moves, window
titles, OSC 8 links) and other control characters removed, tabs and newlines kept."""

from __future__ import annotations

import re

__all__ = ["printable"]

_SEQUENCES = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]"          # CSI: colours, cursor moves, erase
    r"|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC: titles, hyperlinks
    r"|\x1b[PX^_][^\x1b]*(?:\x1b\\)?"   # DCS, SOS, PM, APC strings
    r"|\x1b[ -/]*[0-~]?"                # other escapes
    r"|\x9b[0-?]*[ -/]*[@-~]"           # 8-bit CSI
)
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` without terminal escape sequences or control characters (but tab and newline)."""
    return _CONTROLS.sub("", _SEQUENCES.sub("", text))
