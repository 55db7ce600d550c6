"""Vertex AI's prebuilt TensorFlow training images and when each stops being usable.

From Google's "Supported frameworks list" / "Prebuilt containers for custom training"
(https://cloud.google.com/vertex-ai/docs/supported-frameworks-list, read 2026-11): after a version's
*end of availability* "the images will no longer be usable". Dates Google's page gave are recorded;
a version without one ends no later than the next recorded one (older versions end first).
Every image is ``{us,europe,asia}-docker.pkg.dev/vertex-ai/training/tf-{cpu,gpu}.2-N.py310:latest``.
"""

from __future__ import annotations

import datetime as dt
import re

from multiworker.errors import UserError

__all__ = ["END_OF_AVAILABILITY", "PAGE", "prebuilt_tf_minor", "end_of_availability", "check_image"]

PAGE = "https://cloud.google.com/vertex-ai/docs/supported-frameworks-list"
#: TensorFlow 2.N -> end of availability (None: not given; ends no later than the next dated version)
END_OF_AVAILABILITY: dict[int, dt.date | None] = {
    12: dt.date(2025, 6, 30),
    13: dt.date(2025, 7, 5),
    14: dt.date(2025, 9, 26),
    15: None,
    16: None,
    17: dt.date(2026, 7, 11),
}
# today's vertex-ai/training/..., and the older gcr.io/cloud-aiplatform/training/... names of the same images
_PREBUILT = re.compile(r"(?:^|/)(?:vertex-ai|cloud-aiplatform)/training/tf-(?:cpu|gpu)\.2-(\d+)(?:[.:@]|$)")


def prebuilt_tf_minor(image: str) -> int | None:
    """N of a Vertex AI prebuilt TensorFlow 2.N training image; None for any other image."""
    match = _PREBUILT.search(image or "")
    return int(match.group(1)) if match else None


def end_of_availability(minor: int) -> dt.date | None:
    """The last day TensorFlow 2.``minor``'s prebuilt images are usable (the next dated one's, if
    Google gave none for it); None for a version newer than every recorded one."""
    for version in sorted(END_OF_AVAILABILITY):
        if version >= minor and END_OF_AVAILABILITY[version] is not None:
            return END_OF_AVAILABILITY[version]
    return None


def check_image(image: str | None, *, field: str, today: dt.date | None = None) -> None:
    """Refuse a prebuilt training image past its end of availability: one line naming --image and
    ``multiworker build``."""
    minor = prebuilt_tf_minor(image or "")
    if minor is None:
        return
    end = end_of_availability(minor)
    today = today or dt.date.today()
    if end is not None and today > end:
        raise UserError(f"{field}: {image} is Vertex AI's prebuilt TensorFlow 2.{minor} image, no longer usable "
                        f"since {end.isoformat()} ({PAGE}); build an image with `multiworker build SPEC -t IMAGE "
                        f"--push` and pass --image IMAGE")
