"""Image folders: find class sub-folders and their files, and read them as a dataset.

A class-folder tree is ``SRC/<class>/<image>``, as ``tf.keras.utils.image_dataset_from_directory``
and the flower-photos archive use it. Paths may be anything ``tf.io.gfile`` understands.
"""

from __future__ import annotations

import logging
import posixpath
import random
from dataclasses import dataclass

from multiworker.errors import UserError

__all__ = ["ImageFile", "list_image_folder", "split_files", "files_dataset", "read_image_folder"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ImageFile:
    """One input file: its full path, its path relative to SRC, and its class."""

    path: str
    relpath: str
    label: int
    class_name: str


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


def _join(root: str, name: str) -> str:
    return posixpath.join(root.rstrip("/"), name.rstrip("/"))


def list_image_folder(src: str) -> tuple[list[str], list[ImageFile]]:
    """Return the sorted class names under ``src`` and every file in their folders.

    Files are not checked here; the converter skips those that do not decode. Hidden files
    (``.name``) and files directly in ``src`` are ignored.
    """
    gfile = _gfile()
    if not gfile.exists(src):
        raise UserError(f"{src}: no such directory; give a folder with one sub-folder per class")
    if not gfile.isdir(src):
        raise UserError(f"{src}: is a file; give a folder with one sub-folder per class")
    classes = sorted(
        name.rstrip("/")
        for name in gfile.listdir(src)
        if not name.startswith(".") and gfile.isdir(_join(src, name))
    )
    if not classes:
        raise UserError(
            f"{src}: has no class sub-folders; put the images of each class in SRC/<class>/"
        )
    files: list[ImageFile] = []
    for label, name in enumerate(classes):
        folder = _join(src, name)
        for entry in sorted(gfile.listdir(folder)):
            path = _join(folder, entry)
            if entry.startswith(".") or gfile.isdir(path):
                continue
            files.append(ImageFile(path, f"{name}/{entry.rstrip('/')}", label, name))
    if not files:
        raise UserError(f"{src}: the class folders {classes} hold no files")
    log.debug("found %d files in %d classes under %s", len(files), len(classes), src)
    return classes, files


def split_files(
    files: list[ImageFile], val_split: float, seed: int
) -> tuple[list[ImageFile], list[ImageFile]]:
    """Split per class (stratified) into train and val, deterministically for ``seed``.

    Each class with at least two files keeps at least one in each split when ``val_split > 0``.
    """
    if not 0.0 <= val_split < 1.0:
        raise UserError(f"--val-split is {val_split}; give a fraction in [0, 1), e.g. 0.2")
    by_class: dict[int, list[ImageFile]] = {}
    for f in files:
        by_class.setdefault(f.label, []).append(f)
    rng = random.Random(seed)
    train: list[ImageFile] = []
    val: list[ImageFile] = []
    for label in sorted(by_class):
        group = list(by_class[label])
        rng.shuffle(group)
        n_val = round(len(group) * val_split)
        if val_split > 0 and len(group) >= 2:
            n_val = min(max(n_val, 1), len(group) - 1)
        val.extend(group[:n_val])
        train.extend(group[n_val:])
    rng.shuffle(train)
    rng.shuffle(val)
    return train, val


def files_dataset(files: list[ImageFile], size: int):
    """A ``tf.data.Dataset`` of ``(image float32 [size, size, 3] in [0, 1], label int64)``.

    Decodes and resizes every file on every pass (what TFRecords avoid); files that do not
    decode are dropped with a warning.
    """
    import tensorflow as tf

    def load(path, label):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        image = tf.image.resize(image, (size, size)) / 255.0
        return image, tf.cast(label, tf.int64)

    ds = tf.data.Dataset.from_tensor_slices(([f.path for f in files], [f.label for f in files]))
    ds = ds.map(load, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.ignore_errors(log_warning=True)


def read_image_folder(
    src: str, size: int, *, split: str | None = None, val_split: float = 0.2, seed: int = 0
):
    """(dataset of ``(image, label)``, class names) for a class-folder tree.

    ``split`` "train" or "val" selects the files :func:`split_files` puts there (the split
    ``multiworker data tfrecords`` makes with the same ``val_split`` and ``seed``); None: all.
    """
    classes, files = list_image_folder(src)
    if split is not None:
        if split not in ("train", "val"):
            raise UserError(f"split is {split!r}; use 'train' or 'val'")
        train, val = split_files(files, val_split, seed)
        files = train if split == "train" else val
    return files_dataset(files, size), classes
