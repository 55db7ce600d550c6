"""The pure part of the Vertex backend: the CustomJob plan, executor images, task names."""

from __future__ import annotations

import datetime

import pytest

from multiworker.backends.vertex.body import (
    console_url,
    executor_image,
    plan_job,
    task_replicas,
)
from multiworker.containers.vertex_images import end_of_availability, prebuilt_tf_minor
from multiworker.errors import SpecError, UserError
from multiworker.spec.load import spec_from_dict

BEFORE_2_17_ENDS = datetime.date(2026, 1, 1)  # the prebuilt 2.17 images were still usable


def spec(**fields):
    return spec_from_dict({"name": "j", "module": "trainer.task", **fields}, source="job.yaml")


def test_workers_only_job_runs_worker_0_as_pool_0_and_keeps_replica_names():
    plan = plan_job(spec(pools={"worker": {"replicas": 3}}), job_id="abc", region="us-central1",
                    staging_bucket="gs://b", trainer_args=["--epochs", "1"], today=BEFORE_2_17_ENDS)
    pools = plan.body["jobSpec"]["workerPoolSpecs"]
    assert [p["replicaCount"] for p in pools] == [1, 2]
    assert pools[1]["pythonPackageSpec"]["args"] == ["--epochs", "1"]
    assert plan.package_pools == [0, 1]
    assert plan.tasks == {"workerpool0-0": "worker-0", "workerpool1-0": "worker-1", "workerpool1-1": "worker-2"}
    assert any("worker 0 becomes Vertex AI's chief" in n for n in plan.notes)
    assert plan.body["jobSpec"]["baseOutputDirectory"] == {"outputUriPrefix": "gs://b/multiworker/abc/output"}


def test_task_names_with_every_role():
    assert task_replicas([("chief", 1, "chief"), ("worker", 2, "worker"), ("ps", 1, "ps"), ("evaluator", 1, "evaluator")]) == {
        "workerpool0-0": "chief-0", "workerpool1-0": "worker-0", "workerpool1-1": "worker-1",
        "workerpool2-0": "ps-0", "workerpool3-0": "evaluator-0"}


@pytest.mark.parametrize("region, gpu, expect", [
    ("us-central1", False, "us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest"),
    ("europe-west4", True, "europe-docker.pkg.dev/vertex-ai/training/tf-gpu.2-17.py310:latest"),
    ("asia-east1", False, "asia-docker.pkg.dev/vertex-ai/training/tf-cpu.2-17.py310:latest"),
], ids=["us-cpu", "europe-gpu", "asia-cpu"])
def test_executor_image_is_the_newest_prebuilt_for_tf_2_21(region, gpu, expect):
    notes: list[str] = []
    assert executor_image(region, gpu=gpu, notes=notes, today=BEFORE_2_17_ENDS) == (expect, 17)
    assert "newest prebuilt Vertex AI training image has 2.17" in notes[0]


def test_expired_prebuilt_images_are_refused_naming_image_and_build():
    """Google's table: TensorFlow 2.17's training images are unusable after 2026-07-11; older ones earlier."""
    after = datetime.date(2026, 7, 12)
    with pytest.raises(UserError, match=r"no longer usable since 2026-07-11 .*multiworker build .*--image IMAGE"):
        executor_image("us-central1", gpu=False, notes=[], today=after)
    with pytest.raises(UserError, match=r"^--executor-image: .*tf-cpu.2-15.*since 2026-07-11"):
        plan_job(spec(pools={"chief": {"replicas": 1}}), job_id="x", region="us-central1", today=after,
                 executor="us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-15.py310:latest")
    with pytest.raises(UserError, match=r"^--image: .*tf-cpu.2-12.*since 2025-06-30"):
        plan_job(spec(pools={"chief": {"replicas": 1}}), job_id="x", region="us-central1", today=BEFORE_2_17_ENDS,
                 image="us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12:latest")
    # a custom image (what `multiworker build --push` makes) is never refused
    plan = plan_job(spec(pools={"chief": {"replicas": 1}}), job_id="x", region="us-central1", today=after,
                    image="us-docker.pkg.dev/p/r/trainer:v1")
    assert plan.body["jobSpec"]["workerPoolSpecs"][0]["containerSpec"]["imageUri"] == "us-docker.pkg.dev/p/r/trainer:v1"


def test_end_of_availability_table():
    assert end_of_availability(17) == datetime.date(2026, 7, 11)
    assert end_of_availability(16) == datetime.date(2026, 7, 11)  # no date given: no later than 2.17's
    assert end_of_availability(12) == datetime.date(2025, 6, 30)
    assert end_of_availability(21) is None
    assert prebuilt_tf_minor("europe-docker.pkg.dev/vertex-ai/training/tf-gpu.2-14.py310:latest") == 14
    assert prebuilt_tf_minor("us-docker.pkg.dev/p/r/tf-cpu.2-14:latest") is None


def test_accelerator_picks_the_gpu_image():
    plan = plan_job(spec(pools={"chief": {"replicas": 1, "machine": {"accelerator_type": "NVIDIA_TESLA_T4",
                                                                   "accelerator_count": 1}}}),
                    job_id="x", region="us-central1", staging_bucket="gs://b", today=BEFORE_2_17_ENDS)
    assert "tf-gpu.2-17" in plan.body["jobSpec"]["workerPoolSpecs"][0]["pythonPackageSpec"]["executorImageUri"]


def test_errors_name_the_field_and_the_fix():
    with pytest.raises(UserError, match=r"pools.worker: runs a command, which needs a container image"):
        plan_job(spec_from_dict({"name": "j", "command": "python x.py", "pools": {"worker": {"replicas": 1}}},
                                source="job.yaml"), job_id="x", region="us-central1")
    with pytest.raises(SpecError, match=r"output_dir: ./out is a local path; Vertex AI needs gs://BUCKET/PATH"):
        plan_job(spec(output_dir="./out", pools={"chief": {"replicas": 1}}), job_id="x", region="us-central1",
                 today=BEFORE_2_17_ENDS)
    # a restart policy Vertex AI cannot hold is a note (its own retry rule applies), not a refusal
    plan = plan_job(spec(pools={"chief": {"replicas": 1}}, run_policy={"restart_policy": "Always"}), job_id="x",
                    region="us-central1", today=BEFORE_2_17_ENDS)
    assert any("restart_policy is Always" in n for n in plan.notes)


def test_console_url():
    assert console_url("projects/p/locations/europe-west4/customJobs/42") == \
        "https://console.cloud.google.com/vertex-ai/locations/europe-west4/training/42?project=p"
