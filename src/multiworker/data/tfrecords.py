"""Class-folder images -> sharded TFRecords of resized JPEGs, and the reader trainers use.

Resizing (and augmenting) once, not every epoch, is the point: training then only decodes a
small JPEG per example. Output layout in DST::

    train-00000-of-00004.tfrecord ... val-00000-of-00001.tfrecord   manifest.json

Each shard is written under a hidden temporary name and renamed when complete; the manifest
is written last, so a DST with a manifest is a finished conversion.
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from multiworker.data.images import ImageFile, list_image_folder, split_files
from multiworker.errors import UserError

__all__ = [
    "MANIFEST_NAME",
    "ConversionResult",
    "images_to_tfrecords",
    "read_tfrecords",
    "load_manifest",
    "shard_pattern",
]

log = logging.getLogger(__name__)

MANIFEST_NAME = "manifest.json"


@dataclass
class ConversionResult:
    """What a conversion wrote and what it skipped."""

    dst: str
    classes: list[str]
    counts: dict[str, int]
    sources: dict[str, int]
    shards: dict[str, list[str]]
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def manifest_path(self) -> str:
        return posixpath.join(self.dst, MANIFEST_NAME)


def shard_pattern(dst: str, split: str) -> str:
    """Glob matching the shards of ``split`` ("train" or "val") in ``dst``."""
    return posixpath.join(dst.rstrip("/"), f"{split}-*-of-*.tfrecord")


def _shard_name(split: str, index: int, total: int) -> str:
    return f"{split}-{index:05d}-of-{total:05d}.tfrecord"


def _make_processor(size: int, copies: int):
    """A tf.function: (path, seed[2]) -> 1 + ``copies`` JPEG-encoded size x size images."""
    import tensorflow as tf

    @tf.function(input_signature=[tf.TensorSpec([], tf.string), tf.TensorSpec([2], tf.int64)])
    def process(path, seed):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        image = tf.cast(image, tf.float32)
        outputs = [tf.image.resize(image, (size, size), antialias=True)]
        if copies:
            bigger = tf.image.resize(image, (size * 9 // 8, size * 9 // 8), antialias=True)
        for k in range(copies):
            s = seed + tf.constant([k + 1, 7 * (k + 1)], tf.int64)
            aug = tf.image.stateless_random_crop(bigger, (size, size, 3), seed=s)
            aug = tf.image.stateless_random_flip_left_right(aug, seed=s + 1)
            aug = tf.image.stateless_random_brightness(aug, 0.15 * 255.0, seed=s + 2)
            aug = tf.image.stateless_random_contrast(aug, 0.8, 1.2, seed=s + 3)
            outputs.append(aug)
        return tf.stack([
            tf.io.encode_jpeg(tf.cast(tf.clip_by_value(tf.round(o), 0, 255), tf.uint8), quality=92)
            for o in outputs
        ])

    return process


def _example(encoded: bytes, f: ImageFile, size: int, copy: int) -> bytes:
    import tensorflow as tf

    def b(v: bytes):
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=[v]))

    def i(v: int):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=[v]))

    feats = {
        "image/encoded": b(encoded),
        "image/format": b(b"jpeg"),
        "image/height": i(size),
        "image/width": i(size),
        "image/class/label": i(f.label),
        "image/class/text": b(f.class_name.encode()),
        "image/filename": b(f.relpath.encode()),
        "image/augmented": i(copy),
    }
    return tf.train.Example(features=tf.train.Features(feature=feats)).SerializeToString()


class _ShardSet:
    """N shard writers with temporary names; ``commit`` renames them, ``abort`` deletes them."""

    def __init__(self, dst: str, split: str, total: int):
        import tensorflow as tf

        self._tf = tf
        self.final = [posixpath.join(dst, _shard_name(split, i, total)) for i in range(total)]
        tag = f"{os.getpid()}-{int(time.time() * 1000)}"
        self.temp = [posixpath.join(dst, f".{posixpath.basename(p)}.tmp-{tag}") for p in self.final]
        self.writers = [tf.io.TFRecordWriter(p) for p in self.temp]
        self.count = 0

    def write(self, record: bytes) -> None:
        self.writers[self.count % len(self.writers)].write(record)
        self.count += 1

    def close(self) -> None:
        for w in self.writers:
            w.close()

    def commit(self) -> None:
        self.close()
        for tmp, final in zip(self.temp, self.final):
            self._tf.io.gfile.rename(tmp, final, overwrite=True)

    def abort(self) -> None:
        self.close()
        for tmp in self.temp:
            if self._tf.io.gfile.exists(tmp):
                self._tf.io.gfile.remove(tmp)


def _encode_all(
    files: list[ImageFile], process, seed: int, workers: int
) -> Iterator[tuple[ImageFile, list[bytes] | None, str | None]]:
    """Yield (file, encoded images or None, error) in input order, ``workers`` files at a time.

    Files go to the pool in bounded chunks, so memory does not grow with the number of files.
    """
    import tensorflow as tf

    def one(idx_f: tuple[int, ImageFile]):
        idx, f = idx_f
        try:
            out = process(tf.constant(f.path), tf.constant([seed, idx], tf.int64))
            return f, list(out.numpy()), None
        except tf.errors.OpError as exc:
            return f, None, _reason(exc)

    chunk = workers * 16
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for start in range(0, len(files), chunk):
            yield from pool.map(one, enumerate(files[start:start + chunk], start))


def _reason(exc) -> str:
    """The one line of a TensorFlow op error that says what went wrong."""
    lines = [ln.strip() for ln in (exc.message or "").splitlines() if ln.strip()]
    for i, line in enumerate(lines):
        if line.startswith("[[{{node") and i > 0:
            return lines[i - 1]
    useful = [ln for ln in lines if not ln.startswith(("Graph execution error", "Detected at", "File "))]
    return useful[-1] if useful else type(exc).__name__


def _remove_stale(dst: str, keep: set[str]) -> None:
    import tensorflow as tf

    for split in ("train", "val"):
        for path in tf.io.gfile.glob(shard_pattern(dst, split)):
            if posixpath.basename(path) not in keep:
                log.info("removing stale shard %s", path)
                tf.io.gfile.remove(path)


def images_to_tfrecords(
    src: str,
    dst: str,
    *,
    size: int = 224,
    shards: int = 2,
    augment: int = 0,
    val_split: float = 0.2,
    seed: int = 0,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ConversionResult:
    """Convert the class-folder tree ``src`` into TFRecord shards and a manifest in ``dst``.

    ``augment`` extra randomly cropped/flipped/lit copies are added per *training* image.
    ``progress(done, total)`` is called after each source file. Files that do not decode are
    skipped and listed in the result and the manifest.
    """
    import tensorflow as tf

    if size < 8:
        raise UserError(f"--size is {size}; give the output image side in pixels, e.g. 224")
    if shards < 1:
        raise UserError(f"--shards is {shards}; give at least 1")
    if augment < 0:
        raise UserError(f"--augment is {augment}; give 0 or more copies per training image")
    started = time.monotonic()
    classes, files = list_image_folder(src)
    train, val = split_files(files, val_split, seed)
    tf.io.gfile.makedirs(dst)
    workers = workers or os.cpu_count() or 1
    total = len(files)
    done = 0
    skipped: list[tuple[str, str]] = []
    counts: dict[str, int] = {}
    sources: dict[str, int] = {}
    shard_files: dict[str, list[str]] = {}
    per_class: dict[str, dict[str, int]] = {}
    writers: list[_ShardSet] = []
    try:
        for split, group in (("train", train), ("val", val)):
            if not group:
                counts[split], sources[split], shard_files[split] = 0, 0, []
                continue
            copies = 1 + (augment if split == "train" else 0)
            shard_set = _ShardSet(dst, split, min(shards, len(group) * copies))
            writers.append(shard_set)
            used = 0
            class_counts = dict.fromkeys(classes, 0)
            process = _make_processor(size, copies - 1)
            for f, encoded, error in _encode_all(group, process, seed, workers):
                done += 1
                if encoded is None:
                    skipped.append((f.relpath, error or "unreadable"))
                    log.debug("skipping %s: %s", f.path, error)
                else:
                    used += 1
                    class_counts[f.class_name] += len(encoded)
                    for copy, data in enumerate(encoded):
                        shard_set.write(_example(data, f, size, copy))
                if progress:
                    progress(done, total)
            counts[split], sources[split] = shard_set.count, used
            per_class[split] = class_counts
            shard_files[split] = [posixpath.basename(p) for p in shard_set.final]
        if sum(counts.values()) == 0:
            raise UserError(f"{src}: no file decoded as an image ({len(skipped)} skipped)")
        old_manifest = posixpath.join(dst, MANIFEST_NAME)
        if tf.io.gfile.exists(old_manifest):  # a manifest always describes the shards beside it
            tf.io.gfile.remove(old_manifest)
        for shard_set in writers:
            shard_set.commit()
    except BaseException:
        for shard_set in writers:
            shard_set.abort()
        raise
    _remove_stale(dst, {name for names in shard_files.values() for name in names})
    result = ConversionResult(
        dst=dst, classes=classes, counts=counts, sources=sources, shards=shard_files,
        skipped=skipped, seconds=time.monotonic() - started,
    )
    manifest = {
        "format": "multiworker.tfrecords/v1",
        "source": src,
        "classes": classes,
        "image_size": [size, size, 3],
        "encoding": "jpeg",
        "features": {
            "image/encoded": "bytes", "image/class/label": "int64", "image/class/text": "bytes",
            "image/filename": "bytes", "image/augmented": "int64",
        },
        "augment": augment,
        "val_split": val_split,
        "seed": seed,
        "counts": counts,
        "source_images": sources,
        "counts_per_class": per_class,
        "shards": shard_files,
        "skipped": [{"file": name, "reason": why} for name, why in skipped],
    }
    tmp = posixpath.join(dst, f".{MANIFEST_NAME}.tmp-{os.getpid()}")
    with tf.io.gfile.GFile(tmp, "w") as fh:
        fh.write(json.dumps(manifest, indent=2) + "\n")
    tf.io.gfile.rename(tmp, result.manifest_path, overwrite=True)
    log.info("wrote %s in %.1fs", counts, result.seconds)
    return result


def load_manifest(path: str) -> dict:
    """Read ``manifest.json`` from a conversion folder (or the file itself)."""
    import tensorflow as tf

    file = path if path.endswith(".json") else posixpath.join(path, MANIFEST_NAME)
    if not tf.io.gfile.exists(file):
        raise UserError(f"{file}: no manifest; convert images first with `multiworker data tfrecords`")
    with tf.io.gfile.GFile(file) as fh:
        return json.load(fh)


def read_tfrecords(pattern, size: int, *, shuffle_files: bool = False, seed: int | None = None):
    """A ``tf.data.Dataset`` of ``(image float32 [size, size, 3] in [0, 1], label int64)``.

    ``pattern`` is a glob (or list of globs/files) of shards written by
    :func:`images_to_tfrecords`. Images of another size are resized on the fly.
    """
    import tensorflow as tf

    patterns = [pattern] if isinstance(pattern, str) else list(pattern)
    files = sorted(p for pat in patterns for p in tf.io.gfile.glob(pat))
    if not files:
        raise UserError(f"{', '.join(patterns)}: matches no TFRecord file; check the path or convert first")
    spec = {
        "image/encoded": tf.io.FixedLenFeature([], tf.string),
        "image/class/label": tf.io.FixedLenFeature([], tf.int64),
    }

    def parse(record):
        ex = tf.io.parse_single_example(record, spec)
        image = tf.io.decode_jpeg(ex["image/encoded"], channels=3)
        image = tf.image.resize(image, (size, size)) / 255.0
        return image, ex["image/class/label"]

    ds = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_files:
        ds = ds.shuffle(len(files), seed=seed)
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 4),
                       num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle_files)
    return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
