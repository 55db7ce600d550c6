"""End of availability of Vertex AI's prebuilt training images, by image URI.

A small lookup owned here until the project's table of Vertex prebuilt images (with their end of
patch and end of availability dates) lands; then this module reads that table. The table here is
empty on purpose: dates must come from Vertex AI's "supported frameworks" page, not from memory.
"""

from __future__ import annotations

import datetime
import re

__all__ = ["END_OF_AVAILABILITY", "end_of_availability", "prebuilt_key"]

#: "tf-cpu.2-11" (framework-accelerator.version, as in the image URI) -> the date the image stops working
END_OF_AVAILABILITY: dict[str, datetime.date] = {}

_PREBUILT = re.compile(r"^(?:[a-z0-9-]+\.)?(?:gcr\.io|pkg\.dev)/(?:cloud-aiplatform|vertex-ai)/training/([a-z0-9-]+\.\d+-\d+)")


def prebuilt_key(uri: str) -> str | None:
    """``tf-cpu.2-11`` for ``us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-11.py310:latest``; None for other images."""
    m = _PREBUILT.match(uri.strip())
    return m.group(1) if m else None


def end_of_availability(uri: str) -> datetime.date | None:
    """When a Vertex prebuilt training image stops being available; None when unknown or not prebuilt."""
    key = prebuilt_key(uri)
    return END_OF_AVAILABILITY.get(key) if key else None
