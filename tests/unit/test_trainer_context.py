"""multiworker.trainer: role, directories and strategy choice from synthetic replica environments."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from multiworker.trainer import _env, context, strategy_kind

CHIEF = "127.0.0.1:2000"
WORKERS = ["127.0.0.1:2001", "127.0.0.1:2002"]
PS = ["127.0.0.1:2003"]


def tf_config(cluster: dict, task_type: str, index: int = 0) -> dict[str, str]:
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index},
                                     "environment": "cloud"})}


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({}, dict(task_type="chief", task_index=0, is_chief=True, num_workers=1,
                              has_ps=False, kind="default"), id="no-tf-config"),
        pytest.param(tf_config({"worker": WORKERS}, "worker", 0),
                     dict(task_type="worker", is_chief=True, num_workers=2, kind="multi_worker_mirrored"),
                     id="worker0-without-chief-is-chief"),
        pytest.param(tf_config({"worker": WORKERS}, "worker", 1),
                     dict(task_type="worker", task_index=1, is_chief=False, kind="multi_worker_mirrored"),
                     id="worker1"),
        pytest.param(tf_config({"chief": [CHIEF], "worker": WORKERS}, "worker", 0),
                     dict(is_chief=False, num_workers=3, kind="multi_worker_mirrored"),
                     id="worker0-with-chief"),
        pytest.param(tf_config({"chief": [CHIEF], "worker": WORKERS}, "chief"),
                     dict(task_type="chief", is_chief=True, num_workers=3), id="chief"),
        pytest.param(tf_config({"master": [CHIEF], "worker": WORKERS}, "master"),
                     dict(task_type="chief", is_chief=True, num_workers=3,
                          cluster={"chief": [CHIEF], "worker": WORKERS}), id="master-is-chief"),
        pytest.param(tf_config({"chief": [CHIEF], "worker": WORKERS}, "evaluator"),
                     dict(task_type="evaluator", is_evaluator=True, is_chief=False, num_workers=3,
                          kind="default"), id="evaluator"),
        pytest.param(tf_config({"worker": WORKERS[:1]}, "worker", 0),
                     dict(is_chief=True, num_workers=1, kind="default"), id="single-worker-cluster"),
        pytest.param(tf_config({"chief": [CHIEF], "worker": WORKERS, "ps": PS}, "chief"),
                     dict(is_chief=True, has_ps=True, is_ps=False, kind="parameter_server"), id="pss-chief"),
        pytest.param(tf_config({"chief": [CHIEF], "worker": WORKERS, "ps": PS}, "worker", 1),
                     dict(is_chief=False, has_ps=True, runs_server_only=True, kind="server"), id="pss-worker"),
        pytest.param(tf_config({"chief": [CHIEF], "worker": WORKERS, "ps": PS}, "ps"),
                     dict(is_ps=True, has_ps=True, runs_server_only=True, kind="server"), id="ps"),
        pytest.param(tf_config({"chief": [CHIEF], "worker": WORKERS, "ps": PS}, "evaluator"),
                     dict(is_evaluator=True, runs_server_only=False, kind="default"), id="pss-evaluator"),
    ],
)
def test_context_roles(environ, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = context(environ)
    kind = expected.pop("kind", None)
    for name, value in expected.items():
        assert getattr(ctx, name) == value, name
    if kind:
        assert strategy_kind(ctx) == kind


@pytest.mark.parametrize(
    ("gpus", "cpus", "kind"),
    [(0, 1, "default"), (1, 1, "default"), (2, 1, "mirrored"), (0, 4, "mirrored"), (1, 4, "default")],
    ids=["cpu", "one-gpu", "two-gpus", "logical-cpus", "one-gpu-logical-cpus"],
)
def test_local_strategy_kind(gpus, cpus, kind, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert strategy_kind(context({}), local_gpus=gpus, local_cpus=cpus) == kind


def test_dirs_default_under_cwd(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = context({})
    assert ctx.output_dir == str(tmp_path / "outputs")
    assert ctx.model_dir == str(tmp_path / "outputs" / "model")
    assert ctx.checkpoint_dir == str(tmp_path / "outputs" / "checkpoints")
    assert ctx.tensorboard_dir == str(tmp_path / "outputs" / "logs")


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        pytest.param({"AIP_MODEL_DIR": "gs://b/job/model", "AIP_CHECKPOINT_DIR": "gs://b/job/checkpoints",
                      "AIP_TENSORBOARD_LOG_DIR": "gs://b/job/logs"},
                     dict(output_dir="gs://b/job", model_dir="gs://b/job/model",
                          checkpoint_dir="gs://b/job/checkpoints", tensorboard_dir="gs://b/job/logs"),
                     id="vertex"),
        pytest.param({"AIP_MODEL_DIR": "gs://b/job/model/"},
                     dict(output_dir="gs://b/job", checkpoint_dir="gs://b/job/checkpoints"),
                     id="vertex-model-dir-only"),
        pytest.param({"AIP_MODEL_DIR": "/data/exported"},
                     dict(output_dir="{cwd}/outputs", model_dir="/data/exported",
                          checkpoint_dir="{cwd}/outputs/checkpoints"), id="model-dir-not-named-model"),
        pytest.param({"MULTIWORKER_OUTPUT_DIR": "/jobs/j1", "AIP_MODEL_DIR": "/jobs/j1/model"},
                     dict(output_dir="/jobs/j1", model_dir="/jobs/j1/model",
                          tensorboard_dir="/jobs/j1/logs"), id="launcher"),
        pytest.param({"MULTIWORKER_OUTPUT_DIR": "rel/out"},
                     dict(output_dir="{cwd}/rel/out", model_dir="{cwd}/rel/out/model"), id="relative"),
    ],
)
def test_dirs_from_environment(environ, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = context(environ)
    for name, value in expected.items():
        assert getattr(ctx, name) == value.format(cwd=tmp_path), name


def test_overrides(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = context({"AIP_MODEL_DIR": "/elsewhere/model"}, output_dir=str(tmp_path / "run"), attempt=3)
    assert ctx.output_dir == str(tmp_path / "run")
    assert ctx.model_dir == str(tmp_path / "run" / "model")
    assert ctx.attempt == 3
    assert context({}, model_dir="/m").model_dir == "/m"
    with pytest.raises(TypeError, match="unknown override"):
        context({}, rank=1)


def test_job_id_attempt_threads(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ctx = context({"MULTIWORKER_JOB_ID": "j-7", "MULTIWORKER_ATTEMPT": "2", "MULTIWORKER_THREADS": "3"})
    assert (ctx.job_id, ctx.attempt, ctx.threads) == ("j-7", 2, 3)
    assert (context({}).job_id, context({}).attempt) == (None, 0)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, (None, None)),
        ({"MULTIWORKER_THREADS": "2"}, (2, 2)),
        ({"MULTIWORKER_THREADS": "2", "TF_NUM_INTEROP_THREADS": "4"}, (2, 4)),
        ({"MULTIWORKER_THREADS": "zero"}, (None, None)),
    ],
    ids=["unset", "budget", "explicit-inter-op", "invalid"],
)
def test_thread_budget(environ, expected):
    assert _env.thread_budget(environ) == expected


def test_invalid_tf_config():
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        context({"TF_CONFIG": "{cluster"})


def test_export_normalized_tf_config(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"master": [CHIEF], "worker": WORKERS},
                                                "task": {"type": "master", "index": 0}}))
    _env.export_normalized_tf_config()
    config = json.loads(__import__("os").environ["TF_CONFIG"])
    assert config["cluster"] == {"chief": [CHIEF], "worker": WORKERS}
    assert config["task"] == {"type": "chief", "index": 0}


def test_import_is_light():
    """Replicas import the library before TensorFlow configures itself; the launcher stays out."""
    code = ("import sys, multiworker.trainer as t; t.context();"
            "bad = [m for m in ('tensorflow', 'tf_keras', 'pydantic', 'typer', 'rich') if m in sys.modules];"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_default_strategy_in_process(tmp_path, monkeypatch):
    """No TF_CONFIG: the default strategy, created once; a stale TRAINING_DONE is cleared."""
    import tensorflow as tf

    from multiworker.trainer import _strategy as strategy_module

    for name in ("TF_CONFIG", "MULTIWORKER_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MULTIWORKER_OUTPUT_DIR", str(tmp_path))
    (tmp_path / "TRAINING_DONE").write_text("{}")
    monkeypatch.setattr(strategy_module, "_strategy", None)
    created = strategy_module.strategy()
    assert created is tf.distribute.get_strategy()
    assert strategy_module.strategy() is created
    assert strategy_module.cluster_coordinator() is None
    assert not (tmp_path / "TRAINING_DONE").exists()
