"""A trainer that builds its gs:// paths at run time (``"gs://" + bucket + ...``), run unchanged with
``--map-path gs://B=DIR`` as two workers: every object lands in DIR and the model loads from there."""

from __future__ import annotations

import json
import os
import random
import struct
import subprocess
import sys

import pytest
from helpers import PROGRAMS, mw, status

pytestmark = pytest.mark.integration


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def write_tfrecords(path, records: list[bytes]) -> None:
    """The TFRecord framing, written without TensorFlow: length, its CRC, data, its CRC."""
    with open(path, "wb") as f:
        for record in records:
            length = struct.pack("<Q", len(record))
            f.write(length + struct.pack("<I", _masked_crc(length)) + record + struct.pack("<I", _masked_crc(record)))


def test_runtime_gs_paths_land_in_the_mapped_directory(tmp_path, mw_home):
    data = tmp_path / "bucket"
    (data / "train_tfr").mkdir(parents=True)
    rng = random.Random(0)
    for shard in range(2):
        rows = [[rng.random() for _ in range(4)] for _ in range(16)]
        write_tfrecords(data / "train_tfr" / f"part-{shard}.tfrec", [struct.pack("<5f", *r, sum(r)) for r in rows])
    spec = tmp_path / "job.yaml"
    spec.write_text(f"name: bucket\nmodule: bucket_trainer\nworking_dir: {PROGRAMS}\n"
                    "args: [--bucket, tutorial-bucket]\npools: {worker: {replicas: 2}}\n"
                    "run_policy: {restart_policy: Never}\n")
    proc = mw("run", str(spec), "--map-path", f"gs://tutorial-bucket={data}", home=mw_home, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "gs://tutorial-bucket ->" in proc.stdout  # the stand-in announced before the replicas start
    doc = status(mw_home)
    assert doc["state"] == "Succeeded", doc

    assert list((data / "logs" / "train").glob("events.out.tfevents.*"))  # TensorBoard
    assert (data / "ckpt" / "checkpoint").is_file() and list((data / "ckpt").glob("ckpt-1.data-*"))
    assert (data / "model" / "saved_model.pb").is_file()
    notes = {p.name: json.loads(p.read_text()) for p in (data / "notes").iterdir()}  # google-cloud-storage
    assert sorted(notes) == ["worker-0.json", "worker-1.json"]
    assert all(n["files"] == 2 for n in notes.values())  # the gs:// glob found both shards
    assert not (data / "workertemp_1").exists()  # worker 1's rmtree of its temporary copies reached DIR too
    assert not list(data.rglob(".*.upload"))

    load = ("import sys, numpy as np, tensorflow as tf; m = tf.keras.models.load_model(sys.argv[1]); "
            "print(m.predict(np.ones((1, 4), 'float32'), verbose=0).shape)")
    loaded = subprocess.run([sys.executable, "-c", load, str(data / "model")], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert loaded.returncode == 0 and loaded.stdout.strip().endswith("(1, 1)"), loaded.stderr[-2000:]
