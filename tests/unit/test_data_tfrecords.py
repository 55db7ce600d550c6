"""Image folders -> TFRecord shards -> dataset: counts, labels, shapes, skipped files, errors."""

from __future__ import annotations

import json
import os

import pytest

tf = pytest.importorskip("tensorflow")

from typer.testing import CliRunner  # noqa: E402

from multiworker.data import (  # noqa: E402
    images_to_tfrecords,
    list_image_folder,
    load_manifest,
    read_image_folder,
    read_tfrecords,
    split_files,
)
from multiworker.errors import UserError  # noqa: E402

CLASSES = {"blue": (20, 40, 220), "green": (30, 200, 40), "red": (230, 30, 30)}
PER_CLASS = 5
BAD = {"red/corrupt.jpg", "green/notes.txt"}


def _jpeg(color, height, width) -> bytes:
    base = tf.constant(color, tf.float32)[None, None, :] * tf.ones([height, width, 1])
    noise = tf.random.stateless_uniform([height, width, 3], seed=[1, height], maxval=20.0)
    return tf.io.encode_jpeg(tf.cast(tf.clip_by_value(base + noise, 0, 255), tf.uint8)).numpy()


@pytest.fixture(scope="module")
def image_tree(tmp_path_factory):
    """3 classes x 5 images of varied sizes, plus a corrupt JPEG and a text file."""
    root = tmp_path_factory.mktemp("images")
    for name, color in CLASSES.items():
        (root / name).mkdir()
        for i in range(PER_CLASS):
            (root / name / f"{name}{i}.jpg").write_bytes(_jpeg(color, 40 + 7 * i, 60 - 5 * i))
    good = (root / "red" / "red0.jpg").read_bytes()
    (root / "red" / "corrupt.jpg").write_bytes(good[:120])
    (root / "green" / "notes.txt").write_text("not an image\n")
    (root / "stray.jpg").write_bytes(good)  # files directly in SRC are not a class
    return root


def _count(ds) -> int:
    return sum(1 for _ in ds)


def test_round_trip_counts_labels_shapes(image_tree, tmp_path):
    dst = tmp_path / "out"
    seen = []
    result = images_to_tfrecords(str(image_tree), str(dst), size=32, shards=2, val_split=0.2,
                                 progress=lambda done, total: seen.append((done, total)))
    assert result.classes == sorted(CLASSES)
    # the split is made over the listed files; unreadable ones are then dropped from their split
    _, files = list_image_folder(str(image_tree))
    expected = {name: sum(1 for f in group if f.relpath not in BAD)
                for name, group in zip(("train", "val"), split_files(files, 0.2, seed=0))}
    assert expected["train"] + expected["val"] == 3 * PER_CLASS
    assert result.counts == expected
    assert seen[-1] == (17, 17)
    assert {name for name, _ in result.skipped} == BAD
    assert all(reason for _, reason in result.skipped)

    manifest = load_manifest(str(dst))
    assert manifest["classes"] == sorted(CLASSES)
    assert manifest["image_size"] == [32, 32, 3]
    assert manifest["counts"] == expected
    assert sum(manifest["counts_per_class"]["val"].values()) == expected["val"]
    assert {s["file"] for s in manifest["skipped"]} == BAD
    for names in manifest["shards"].values():
        assert len(names) == 2
        assert all((dst / n).is_file() for n in names)
    assert not [p for p in os.listdir(dst) if ".tmp" in p]

    ds = read_tfrecords(str(dst / "train-*"), 32)
    images, labels = zip(*[(x.numpy(), int(y)) for x, y in ds])
    assert len(images) == expected["train"]
    assert all(x.shape == (32, 32, 3) and 0.0 <= x.min() and x.max() <= 1.0 for x in images)
    assert set(labels) == {0, 1, 2}
    # the label follows the colour of the class folder
    for x, y in zip(images, labels):
        assert int(x.mean(axis=(0, 1)).argmax()) == {0: 2, 1: 1, 2: 0}[y]
    assert _count(read_tfrecords(str(dst / "val-*"), 16)) == expected["val"]


def test_augment_adds_copies_to_train_only(image_tree, tmp_path):
    result = images_to_tfrecords(str(image_tree), str(tmp_path), size=24, shards=3, augment=2)
    assert result.counts == {"train": 3 * result.sources["train"], "val": result.sources["val"]}
    assert _count(read_tfrecords(str(tmp_path / "train-*"), 24)) == result.counts["train"]


def test_rerun_with_fewer_shards_removes_stale_shards(image_tree, tmp_path):
    images_to_tfrecords(str(image_tree), str(tmp_path), size=16, shards=4)
    images_to_tfrecords(str(image_tree), str(tmp_path), size=16, shards=1)
    assert sorted(p.name for p in tmp_path.glob("*.tfrecord")) == [
        "train-00000-of-00001.tfrecord", "val-00000-of-00001.tfrecord"]


def test_split_is_stratified_and_deterministic(image_tree):
    _, files = list_image_folder(str(image_tree))
    a = split_files(files, 0.4, seed=3)
    b = split_files(files, 0.4, seed=3)
    assert a == b
    assert sorted(f.class_name for f in a[1]).count("blue") == 2


def test_read_image_folder_skips_unreadable(image_tree):
    ds, classes = read_image_folder(str(image_tree), 20)
    assert classes == sorted(CLASSES)
    assert _count(ds) == 3 * PER_CLASS
    val, _ = read_image_folder(str(image_tree), 20, split="val", val_split=0.2, seed=0)
    _, files = list_image_folder(str(image_tree))
    assert _count(val) == sum(1 for f in split_files(files, 0.2, 0)[1] if f.relpath not in BAD)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda p: p / "missing", "no such directory"),
        (lambda p: (p / "flat").mkdir() or (p / "flat" / "a.jpg").write_bytes(b"x") and p / "flat",
         "no class sub-folders"),
        (lambda p: (p / "empty" / "cls").mkdir(parents=True) or p / "empty", "hold no files"),
    ],
    ids=["missing-src", "no-class-folders", "empty-classes"],
)
def test_bad_input_is_a_user_error(tmp_path, make, match):
    with pytest.raises(UserError, match=match):
        images_to_tfrecords(str(make(tmp_path)), str(tmp_path / "out"))


def test_only_unreadable_files_is_a_user_error(tmp_path):
    (tmp_path / "src" / "a").mkdir(parents=True)
    (tmp_path / "src" / "a" / "x.jpg").write_text("nope")
    with pytest.raises(UserError, match="no file decoded"):
        images_to_tfrecords(str(tmp_path / "src"), str(tmp_path / "out"))
    assert not list((tmp_path / "out").glob("*"))


def test_reader_without_files_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="matches no TFRecord"):
        read_tfrecords(str(tmp_path / "train-*"), 8)


def test_cli_json_and_errors(image_tree, tmp_path):
    from multiworker.cli import app, data_cmd

    if not any(g.name == "data" for g in app.registered_groups):
        data_cmd.register(app)
    runner = CliRunner()
    out = runner.invoke(app, ["data", "tfrecords", str(image_tree), str(tmp_path / "o"),
                              "--size", "16", "--shards", "1", "--json"])
    assert out.exit_code == 0, out.output
    payload = json.loads(out.stdout)
    assert sum(payload["counts"].values()) == 3 * PER_CLASS
    assert len(payload["skipped"]) == 2

    bad = runner.invoke(app, ["data", "tfrecords", str(tmp_path / "nope"), str(tmp_path / "o")])
    assert isinstance(bad.exception, UserError)


def test_interrupted_conversion_leaves_no_shard_or_manifest(image_tree, tmp_path):
    def interrupt(done, total):
        if done == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        images_to_tfrecords(str(image_tree), str(tmp_path), size=16, progress=interrupt)
    assert list(tmp_path.iterdir()) == []
