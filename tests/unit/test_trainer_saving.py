"""multiworker.trainer: atomic SavedModel and metrics.json writes, and the TRAINING_DONE marker."""

from __future__ import annotations

import json
import os
import socket
import time

import pytest

from multiworker.metrics_line import parse_metric
from multiworker.trainer import (
    context,
    done_marker_path,
    mark_training_done,
    save_model,
    training_done,
    write_metrics_json,
)
from multiworker.trainer._fs import publish_dir

WORKER1 = {"TF_CONFIG": json.dumps({"cluster": {"worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}})}


@pytest.fixture(scope="module")
def tiny_model():
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    import tf_keras as keras

    model = keras.Sequential([keras.layers.Input(shape=(4,)), keras.layers.Dense(3)])
    model.compile(optimizer="adam", loss="mse")
    return model


def siblings(path):
    parent, name = os.path.split(path)
    return sorted(p for p in os.listdir(parent) if p.startswith(name))


def test_save_model_chief_replaces_atomically(tiny_model, tmp_path):
    import numpy as np
    import tf_keras as keras

    ctx = context({}, output_dir=str(tmp_path))
    (tmp_path / "model").mkdir()  # an empty directory, as a launcher may pre-create
    assert save_model(tiny_model, ctx=ctx) == ctx.model_dir
    first = os.stat(os.path.join(ctx.model_dir, "saved_model.pb")).st_mtime_ns
    assert save_model(tiny_model, ctx=ctx) == ctx.model_dir  # over a full directory
    assert os.stat(os.path.join(ctx.model_dir, "saved_model.pb")).st_mtime_ns >= first
    assert siblings(ctx.model_dir) == ["model"]  # no temporary or old directories left
    loaded = keras.models.load_model(ctx.model_dir)
    assert loaded.predict(np.zeros((2, 4)), verbose=0).shape == (2, 3)


class FailingModel:
    """Writes part of a model, then fails, like a save interrupted midway."""

    def save(self, path, **_):
        os.makedirs(path)
        with open(os.path.join(path, "partial"), "w") as f:
            f.write("x")
        raise RuntimeError("disk full")


def test_failed_save_leaves_previous_model(tmp_path):
    ctx = context({}, output_dir=str(tmp_path))
    os.makedirs(ctx.model_dir)
    (tmp_path / "model" / "saved_model.pb").write_text("old")
    with pytest.raises(RuntimeError, match="disk full"):
        save_model(FailingModel(), ctx=ctx)
    assert (tmp_path / "model" / "saved_model.pb").read_text() == "old"
    assert siblings(ctx.model_dir) == ["model"]


def test_non_chief_saves_to_scratch(tiny_model, tmp_path):
    ctx = context(WORKER1, output_dir=str(tmp_path))
    assert not ctx.is_chief
    assert save_model(tiny_model, ctx=ctx) == ctx.model_dir
    assert not os.path.exists(ctx.model_dir)


def test_publish_dir_replaces_non_empty(tmp_path):
    target, tmp = tmp_path / "t", tmp_path / "new"
    target.mkdir()
    (target / "old.txt").write_text("old")
    tmp.mkdir()
    (tmp / "new.txt").write_text("new")
    publish_dir(str(tmp), str(target))
    assert sorted(os.listdir(target)) == ["new.txt"]
    assert sorted(os.listdir(tmp_path)) == ["t"]


def test_write_metrics_json(tmp_path, capsys):
    ctx = context({}, output_dir=str(tmp_path / "out"))
    path = write_metrics_json({"test_accuracy": 0.99, "epochs": 2}, ctx=ctx)
    assert json.loads(open(path).read()) == {"test_accuracy": 0.99, "epochs": 2}
    lines = [parse_metric(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [{"kind": "final", "test_accuracy": 0.99, "epochs": 2}]
    assert write_metrics_json({"a": 1}, ctx=context(WORKER1, output_dir=str(tmp_path / "w"))) is None
    assert not (tmp_path / "w").exists()


def test_training_done_marker(tmp_path):
    ctx = context({"MULTIWORKER_JOB_ID": "j1"}, output_dir=str(tmp_path))
    assert training_done(ctx) is None
    path = mark_training_done(ctx)
    assert path == done_marker_path(ctx) == str(tmp_path / "TRAINING_DONE")
    record = training_done(ctx)
    assert record["job_id"] == "j1" and record["task"] == "chief-0" and record["final_checkpoint"] is None
    # another job's marker is stale, whatever its time
    assert training_done(context({"MULTIWORKER_JOB_ID": "j2"}, output_dir=str(tmp_path))) is None
    # without job ids, a marker older than the reader's start is stale
    bare = context({}, output_dir=str(tmp_path))
    assert training_done(bare, since=time.time() + 60) is None
    assert training_done(bare, since=time.time() - 60) is not None
    # only the chief writes it
    assert mark_training_done(context(WORKER1, output_dir=str(tmp_path / "w"))) is None


def test_publish_dir_never_leaves_the_model_missing(tmp_path):
    """A reader process polling the model dir while it is replaced 300 times always finds a complete tree."""
    import subprocess
    import sys

    target = tmp_path / "model"
    target.mkdir()
    (target / "saved_model.pb").write_text("0")
    stop = tmp_path / "stop"
    reader = subprocess.Popen([sys.executable, "-c", (
        "import os,sys\n"
        f"t, s = {str(target / 'saved_model.pb')!r}, {str(stop)!r}\n"
        "checks = misses = 0\n"
        "while not os.path.exists(s):\n"
        "    checks += 1\n"
        "    misses += not os.path.isfile(t)\n"
        "print(checks, misses)\n")], stdout=subprocess.PIPE, text=True)
    try:
        for i in range(300):
            tmp = tmp_path / f"model.tmp-{i}"
            tmp.mkdir()
            (tmp / "saved_model.pb").write_text(str(i + 1))
            publish_dir(str(tmp), str(target))
    finally:
        stop.touch()
        checks, misses = map(int, reader.communicate(timeout=30)[0].split())
    assert checks > 300 and misses == 0, (checks, misses)
    assert (target / "saved_model.pb").read_text() == "300"
    assert sorted(os.listdir(tmp_path)) == ["model", "stop"]


_SLOW_SAVE = """
import os, sys, time
from multiworker.trainer import context, save_model

class SlowModel:
    def save(self, path, **_):
        os.makedirs(path)
        with open(os.path.join(path, "variables.data"), "wb") as f:
            f.write(b"x" * 4096)
        open(sys.argv[2], "w").close()  # started: the parent kills us now
        time.sleep(600)

save_model(SlowModel(), ctx=context({}, output_dir=sys.argv[1]))
"""


class QuickModel:
    def save(self, path, **_):
        os.makedirs(path)
        with open(os.path.join(path, "saved_model.pb"), "w") as f:
            f.write("ok")


def test_a_save_killed_midway_leaves_nothing_after_the_next_save(tmp_path):
    import signal
    import subprocess
    import sys

    ctx = context({}, output_dir=str(tmp_path))
    for n in range(2):
        started = tmp_path / f"started-{n}"
        proc = subprocess.Popen([sys.executable, "-c", _SLOW_SAVE, str(tmp_path), str(started)])
        deadline = time.monotonic() + 120
        while not started.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), "the save never started"
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
    assert [s for s in siblings(ctx.model_dir) if ".tmp-" in s]  # what SIGKILL leaves
    save_model(QuickModel(), ctx=ctx)
    assert siblings(ctx.model_dir) == ["model"]


def test_a_save_leaves_a_live_writers_temporary_copy_alone(tmp_path):
    ctx = context({}, output_dir=str(tmp_path))
    other = tmp_path / f"model.tmp-{os.getppid()}-0123abcd"  # a live process (our parent) is writing it
    other.mkdir()
    save_model(QuickModel(), ctx=ctx)
    assert siblings(ctx.model_dir) == ["model", other.name]


def test_server_sigterm_exit_code_says_whether_training_was_done(tmp_path):
    """A ps (or a worker under ParameterServerStrategy) stopped while the chief trains exits 143, a
    failure the restart policy replaces; once the chief is gone or has written TRAINING_DONE, 0."""
    from multiworker.trainer._server import sigterm_exit_code

    def ps_with_chief_at(chief: str):
        return context({"MULTIWORKER_JOB_ID": "j1", "TF_CONFIG": json.dumps(
            {"cluster": {"chief": [chief], "ps": ["127.0.0.1:1"]}, "task": {"type": "ps", "index": 0}})},
            output_dir=str(tmp_path))

    with socket.socket() as chief:  # the chief, alive and listening: training goes on
        chief.bind(("127.0.0.1", 0))
        chief.listen()
        alive = f"127.0.0.1:{chief.getsockname()[1]}"
        assert sigterm_exit_code(ps_with_chief_at(alive), started=time.time()) == 143
    # the chief gone (its port refuses): the job is over, whatever the trainer wrote
    assert sigterm_exit_code(ps_with_chief_at(alive), started=time.time()) == 0
    with socket.socket() as chief:
        chief.bind(("127.0.0.1", 0))
        chief.listen()
        ps = ps_with_chief_at(f"127.0.0.1:{chief.getsockname()[1]}")
        mark_training_done(context({"MULTIWORKER_JOB_ID": "j1"}, output_dir=str(tmp_path)))
        assert sigterm_exit_code(ps, started=time.time()) == 0
