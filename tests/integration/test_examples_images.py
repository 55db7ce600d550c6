"""Flowers and cats-vs-dogs through `multiworker run`: 2 workers train, the exported model predicts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import REPO, mw, status

pytestmark = pytest.mark.integration
tf = pytest.importorskip("tensorflow")

FLOWERS = REPO / "examples" / "flowers"
CATS_VS_DOGS = REPO / "examples" / "cats_vs_dogs"


def _predict(model_dir: Path, images) -> dict:
    serve = tf.saved_model.load(str(model_dir)).signatures["serving_default"]
    return {k: v.numpy() for k, v in serve(image=tf.constant(images)).items()}


def _succeeded(proc, home) -> tuple[dict, dict]:
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    doc = status(home)
    assert doc["state"] == "Succeeded" and doc["restarts"] == 0, doc
    metrics = json.loads((Path(doc["output_dir"]) / "metrics.json").read_text())
    return doc, metrics


def test_flowers_two_workers_train_and_model_names_classes(mw_home):
    proc = mw("run", str(FLOWERS / "job.yaml"), "-q", "--", "--epochs", "1", "--steps-per-epoch", "2",
              "--image-size", "32", home=mw_home)
    doc, metrics = _succeeded(proc, mw_home)
    assert [r["state"] for r in doc["replicas"]] == ["Succeeded", "Succeeded"]
    assert metrics["workers"] == 2
    assert metrics["classes"] == ["daisy", "dandelion", "roses", "sunflowers", "tulips"]
    assert metrics["chance_accuracy"] == 0.2 and 0.0 <= metrics["val_accuracy"] <= 1.0

    from multiworker.data import read_image_folder

    images, _ = next(iter(read_image_folder(str(FLOWERS / "data"), 32)[0].batch(3)))
    out = _predict(Path(doc["output_dir"]) / "model", images)
    assert out["probabilities"].shape == (3, 5)
    assert {name.decode() for name in out["class_name"]} <= set(metrics["classes"])


@pytest.fixture(scope="module")
def pet_records(tmp_path_factory) -> Path:
    """Generated 'cat' (warm) and 'dog' (cool) photos converted with `multiworker data tfrecords`."""
    root = tmp_path_factory.mktemp("pets")
    src, dst = root / "photos", root / "tfrecords"
    for label, color in (("cat", (200, 120, 60)), ("dog", (60, 110, 200))):
        (src / label).mkdir(parents=True)
        for i in range(10):
            noise = tf.random.stateless_uniform([48 + i, 40, 3], seed=[i, len(label)], maxval=60.0)
            pixels = tf.clip_by_value(tf.constant(color, tf.float32) + noise - 30.0, 0, 255)
            (src / label / f"{label}{i}.jpg").write_bytes(tf.io.encode_jpeg(tf.cast(pixels, tf.uint8)).numpy())
    proc = mw("data", "tfrecords", str(src), str(dst), "--size", "32", "--augment", "1", "--json",
              home=root, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["counts"] == {"train": 32, "val": 4}
    return dst


def test_cats_vs_dogs_two_workers_bfloat16(mw_home, pet_records):
    proc = mw("run", str(CATS_VS_DOGS / "job.yaml"), "-q", "--", "--data", str(pet_records), "--epochs", "1",
              "--steps-per-epoch", "2", "--precision", "mixed_bfloat16", home=mw_home)
    doc, metrics = _succeeded(proc, mw_home)
    assert metrics["strategy"] == "MultiWorkerMirroredStrategy" and metrics["replicas_in_sync"] == 2
    assert metrics["precision"] == "mixed_bfloat16" and metrics["image_size"] == 32
    images = tf.random.stateless_uniform([2, 32, 32, 3], seed=[1, 2])
    out = _predict(Path(doc["output_dir"]) / "model", images)
    assert out["probabilities"].shape == (2, 2) and out["probabilities"].dtype == "float32"
    assert {name.decode() for name in out["class_name"]} <= {"cat", "dog"}


def test_cats_vs_dogs_mirrored_over_logical_cpus(mw_home, pet_records):
    proc = mw("run", str(CATS_VS_DOGS / "job-local.yaml"), "-q", "--", "--data", str(pet_records),
              "--epochs", "1", "--steps-per-epoch", "2", home=mw_home)
    _, metrics = _succeeded(proc, mw_home)
    assert metrics["strategy"] == "MirroredStrategy" and metrics["replicas_in_sync"] == 2
