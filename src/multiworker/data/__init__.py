"""Input pipelines for trainers: image folders, TFRecord shards and their manifest.

TensorFlow is imported when a function runs, not when this package is imported, so the
CLI stays quick to start.
"""

from __future__ import annotations

from multiworker.data.images import (
    ImageFile,
    files_dataset,
    list_image_folder,
    read_image_folder,
    split_files,
)
from multiworker.data.tfrecords import (
    MANIFEST_NAME,
    ConversionResult,
    images_to_tfrecords,
    load_manifest,
    read_tfrecords,
    shard_pattern,
)

__all__ = [
    "MANIFEST_NAME",
    "ConversionResult",
    "ImageFile",
    "files_dataset",
    "images_to_tfrecords",
    "list_image_folder",
    "load_manifest",
    "read_image_folder",
    "read_tfrecords",
    "shard_pattern",
    "split_files",
]
