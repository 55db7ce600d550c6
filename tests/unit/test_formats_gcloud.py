"""gcloud command lines -> the job they submit: a table against native specs, flags over --config,
each replica's TF_CONFIG, round trips to Vertex/AI Platform configs, one-line errors with a did-you-mean."""

from __future__ import annotations

import copy
import shlex
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest
import yaml

from multiworker.cluster import ReplicaId, cluster_map, replica_ids, tf_config
from multiworker.errors import SpecError
from multiworker.spec.formats import parse_job
from multiworker.spec.formats.convert import convert
from multiworker.spec.formats.gcloud import (
    load_command,
    looks_like_gcloud,
    parse_command,
)
from multiworker.spec.load import spec_from_dict

REPO = Path(__file__).resolve().parents[2]
MNIST = REPO / "examples" / "mnist"

# The issue's command lines, verbatim.
ISSUE_AIPLATFORM = ("gcloud ai-platform jobs submit training JOB --region asia-east1 --master-image-uri IMG "
                    "--config ./config.yaml -- trainer/task.py --bucket B --train-pattern gs://B/train_tfr")
ISSUE_AIPLATFORM_LOCAL = ("multiworker gcloud ai-platform jobs submit training JOB --config config.yaml "
                          "--master-image-uri IMG --dockerfile Dockerfile --map-path gs://B=./gcs -- trainer/task.py "
                          "--bucket B")
ISSUE_CREATE = (
    "multiworker gcloud ai custom-jobs create --region R --display-name J "
    "--worker-pool-spec=machine-type=n1-standard-4,replica-count=1,executor-image-uri=IMG,python-module=trainer.task "
    "--worker-pool-spec=machine-type=n1-standard-4,replica-count=2,executor-image-uri=IMG,python-module=trainer.task "
    "--python-package-uris=gs://B/trainer-0.1.tar.gz --map-path gs://B=./gcs"
)
ISSUE_LOCAL_RUN = ("multiworker gcloud ai custom-jobs local-run --executor-image-uri IMG --local-package-path . "
                   "--python-module trainer.task -- --epochs 2")
# The AI Platform config.yaml that holds only machines (the program is on the command line).
MACHINES_ONLY = {"trainingInput": {"scaleTier": "CUSTOM", "masterType": "n1-standard-4", "workerType": "n1-standard-4",
                                   "workerCount": 1}}


def words(line: str) -> list[str]:
    """A shell line as argv after `multiworker gcloud` (or the whole gcloud line)."""
    argv = shlex.split(line)
    return argv[2:] if argv[:2] == ["multiworker", "gcloud"] else argv


def native(line: str, cwd: Path = MNIST) -> dict:
    return parse_command(words(line), cwd=cwd).parsed.native


def tf_configs(spec) -> dict[str, dict | None]:
    """Each replica's TF_CONFIG for ports 2000, 2001, ..."""
    addresses = {rid: f"127.0.0.1:{2000 + i}" for i, rid in enumerate(replica_ids(spec))}
    cluster = cluster_map(spec, addresses)
    return {rid.name: tf_config(spec, rid, cluster) for rid in replica_ids(spec)}


@pytest.fixture
def ctx(tmp_path: Path) -> Path:
    """A working directory with the issue's config.yaml, a trainer package and a Dockerfile."""
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(MACHINES_ONLY))
    (tmp_path / "trainer").mkdir()
    (tmp_path / "trainer" / "__init__.py").write_text("")
    (tmp_path / "trainer" / "task.py").write_text("")
    (tmp_path / "gcs").mkdir()
    with tarfile.open(tmp_path / "gcs" / "trainer-0.1.tar.gz", "w:gz") as tar:  # an sdist of the trainer
        tar.add(tmp_path / "trainer", arcname="trainer-0.1/trainer")
        tar.add(tmp_path / "config.yaml", arcname="trainer-0.1/PKG-INFO")
    (tmp_path / "Dockerfile").write_text('FROM python:3.11\nWORKDIR /app\nCOPY trainer/ /app/trainer/\n'
                                         'ENTRYPOINT ["python"]\n')
    return tmp_path


# -- the issue's forms, verbatim -------------------------------------------------------------------------------

def test_issue_aiplatform_line_with_config_of_machines(ctx):
    job = parse_command(words(ISSUE_AIPLATFORM), cwd=ctx)
    assert job.parsed.format == "aiplatform" and job.config == ctx / "config.yaml"
    assert job.parsed.native == {
        "name": "JOB", "image": "IMG", "args": ["trainer/task.py", "--bucket", "B", "--train-pattern", "gs://B/train_tfr"],
        "chief_task_type": "master",
        "pools": {"chief": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
                  "worker": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}}},
        "run_policy": {"restart_policy": "ExitCode"},
    }
    assert "scheduling and placement settings do not apply locally: trainingInput.region" in job.parsed.all_notes()


def test_issue_aiplatform_line_runs_the_dockerfile_entry_point(ctx):
    loaded, job = load_command(words(ISSUE_AIPLATFORM_LOCAL), cwd=ctx)
    assert job.local == {"dockerfile": "Dockerfile", "map-path": ["gs://B=./gcs"]}
    chief = loaded.spec.resolved("chief")
    assert chief.command == [sys.executable, "trainer/task.py"] and chief.args == ["--bucket", "B"]
    assert Path(chief.working_dir) == ctx  # the Dockerfile's WORKDIR /app is the build context
    configs = tf_configs(loaded.spec)  # no useChiefInTfConfig: AI Platform names the primary `master`
    assert configs["chief-0"]["task"] == {"type": "master", "index": 0}
    assert configs["worker-0"]["cluster"] == {"master": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001"]}


def test_issue_create_line_runs_the_package_from_the_mapped_bucket(ctx):
    loaded, job = load_command(words(ISSUE_CREATE), cwd=ctx)
    assert job.parsed.native["name"] == "J" and job.parsed.native["module"] == "trainer.task"
    assert job.parsed.packages["chief"][0][0] == "gs://B/trainer-0.1.tar.gz"
    assert loaded.spec.replica_counts() == {"chief": 1, "worker": 2}
    configs = tf_configs(loaded.spec)
    assert {name: c["task"] for name, c in configs.items()} == {
        "chief-0": {"type": "chief", "index": 0}, "worker-0": {"type": "worker", "index": 0},
        "worker-1": {"type": "worker", "index": 1}}
    assert configs["worker-1"]["cluster"] == {"chief": ["127.0.0.1:2000"],
                                              "worker": ["127.0.0.1:2001", "127.0.0.1:2002"]}


def test_issue_local_run_line_is_one_replica_without_tf_config(ctx):
    loaded, _ = load_command(words(ISSUE_LOCAL_RUN), cwd=ctx)
    assert loaded.spec.replica_counts() == {"chief": 1}
    chief = loaded.spec.resolved("chief")
    assert (chief.module, chief.args, Path(chief.working_dir)) == ("trainer.task", ["--epochs", "2"], ctx)
    assert tf_configs(loaded.spec) == {"chief-0": None}  # one container, as local-run runs it


# -- a table of command lines against the spec each produces ----------------------------------------------------

POOL = "machine-type=n1-standard-4"
TABLE = [
    ("create-container-pools",
     f"gcloud ai custom-jobs create --display-name=mnist --region=us-central1 "
     f"--worker-pool-spec={POOL},replica-count=1,container-image-uri=gcr.io/p/m:1 "
     f"--worker-pool-spec={POOL},replica-count=3,container-image-uri=gcr.io/p/m:1 --args=--epochs=2,--steps=5",
     {"name": "mnist", "image": "gcr.io/p/m:1", "args": ["--epochs=2", "--steps=5"],
      "pools": {"chief": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
                "worker": {"replicas": 3, "machine": {"machine_type": "n1-standard-4"}}}}),
    ("create-command-accelerator-empty-pool",
     f"ai custom-jobs create --display-name x --worker-pool-spec={POOL},accelerator-type=nvidia-tesla-t4,"
     f"container-image-uri=i --worker-pool-spec= --worker-pool-spec={POOL},container-image-uri=ps "
     f"--command=python,-m,trainer.task",
     {"name": "x", "module": "trainer.task",
      "pools": {"chief": {"replicas": 1, "image": "i", "machine": {
          "machine_type": "n1-standard-4", "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 1}},
                "ps": {"replicas": 1, "image": "ps", "machine": {"machine_type": "n1-standard-4"}}}}),
    ("create-custom-delimiter-args",
     f"gcloud beta ai custom-jobs create --display-name x --worker-pool-spec={POOL},container-image-uri=i "
     "--args=^;^--layers=1,2;--lr=0.1",
     {"name": "x", "image": "i", "args": ["--layers=1,2", "--lr=0.1"],
      "pools": {"chief": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}}}}),
    ("create-autopackaged-script",
     f"gcloud ai custom-jobs create --display-name x --worker-pool-spec={POOL},executor-image-uri=e,"
     f"local-package-path=.,script=trainer/task.py,output-image-uri=gcr.io/p/built:1 "
     f"--worker-pool-spec={POOL},replica-count=2",
     {"name": "x", "image": "gcr.io/p/built:1", "command": ["python", "trainer/task.py"], "working_dir": "CTX",
      "pools": {"chief": {"replicas": 1, "machine": {"machine_type": "n1-standard-4"}},
                "worker": {"replicas": 2, "machine": {"machine_type": "n1-standard-4"}}}}),
    ("local-run-script-positional-args",
     "gcloud ai custom-jobs local-run --executor-image-uri=e --script=trainer/task.py -- --epochs=1",
     {"name": "task", "command": ["python", "trainer/task.py"], "args": ["--epochs=1"], "working_dir": "CTX",
      "pools": {"chief": {"replicas": 1}}}),
    ("local-run-executor-entry-point",
     "gcloud ai custom-jobs local-run --executor-image-uri=gcr.io/p/m:1 -- --epochs 1",
     {"name": "local-run", "image": "gcr.io/p/m:1", "args": ["--epochs", "1"], "pools": {"chief": {"replicas": 1}}}),
    ("aiplatform-flags-only",
     "gcloud ai-platform jobs submit training j1 --region us-central1 --scale-tier custom --master-image-uri m "
     "--master-machine-type n1-standard-8 --worker-machine-type n1-standard-4 --worker-count 2 "
     "--parameter-server-machine-type n1-highmem-2 --parameter-server-count 1 --use-chief-in-tf-config=true "
     "--worker-accelerator type=nvidia-tesla-t4,count=2 -- --epochs 1",
     {"name": "j1", "image": "m", "args": ["--epochs", "1"],
      "pools": {"chief": {"replicas": 1, "machine": {"machine_type": "n1-standard-8"}},
                "worker": {"replicas": 2, "machine": {"machine_type": "n1-standard-4",
                                                     "accelerator_type": "NVIDIA_TESLA_T4", "accelerator_count": 2}},
                "ps": {"replicas": 1, "machine": {"machine_type": "n1-highmem-2"}}}}),
    ("aiplatform-package-path-job-dir",
     "gcloud ml-engine jobs submit training j2 --module-name trainer.task --package-path trainer/ "
     "--runtime-version 2.11 --python-version 3.7 --job-dir gs://b/out --stream-logs -- --epochs 1",
     {"name": "j2", "module": "trainer.task", "args": ["--epochs", "1", "--job-dir=gs://b/out"],
      "output_dir": "gs://b/out", "pools": {"chief": {"replicas": 1, "machine": {"scale_tier": "BASIC"}}}}),
    ("aiplatform-worker-image",
     "gcloud ai-platform jobs submit training j3 --scale-tier=CUSTOM --master-machine-type=n1 --master-image-uri=m "
     "--worker-machine-type=n1 --worker-count=1 --worker-image-uri=w --no-use-chief-in-tf-config",
     {"name": "j3", "chief_task_type": "master",
      "pools": {"chief": {"replicas": 1, "image": "m", "machine": {"machine_type": "n1"}},
                "worker": {"replicas": 1, "image": "w", "machine": {"machine_type": "n1"}}}}),
]


@pytest.mark.parametrize("line,expected", [t[1:] for t in TABLE], ids=[t[0] for t in TABLE])
def test_command_line_table(ctx, line, expected):
    got = native(line, cwd=ctx)
    got.pop("run_policy")
    expected = {k: (str(ctx) if v == "CTX" else v) for k, v in expected.items()}
    assert got == expected
    spec_from_dict(got, source="t")  # a valid native spec


def test_create_flags_replace_config_pools_and_args_reach_every_pool(ctx):
    """As gcloud: --worker-pool-spec replaces the config's pools; --args override each pool's args."""
    config = ctx / "vertex.yaml"
    config.write_text(textwrap.dedent("""\
        workerPoolSpecs:
            machineSpec:
                machineType: n1-highmem-2
            replicaCount: 1
            containerSpec:
                imageUri: gcr.io/ucaip-test/ucaip-training-test
                args: [port=8500]
                command: [start]
        baseOutputDirectory: {outputUriPrefix: gs://b/out}
    """))  # Google's documented config: workerPoolSpecs as one mapping
    base = "gcloud ai custom-jobs create --display-name=test --config=vertex.yaml"
    assert native(base, ctx)["args"] == ["port=8500"] and native(base, ctx)["command"] == ["start"]
    assert native(base, ctx)["output_dir"] == "gs://b/out"
    assert native(f"{base} --args=port=9000 --command=serve", ctx)["args"] == ["port=9000"]
    assert native(f"{base} --args=port=9000 --command=serve", ctx)["command"] == ["serve"]
    replaced = native(f"{base} --worker-pool-spec={POOL},container-image-uri=other", ctx)
    assert replaced["image"] == "other" and "args" not in replaced and replaced["output_dir"] == "gs://b/out"


def test_aiplatform_flags_override_config(ctx):
    config = ctx / "job.yaml"
    config.write_text(yaml.safe_dump({"jobId": "fromfile", "trainingInput": {
        **MACHINES_ONLY["trainingInput"], "masterConfig": {"imageUri": "old"}, "args": ["--from-file"],
        "jobDir": "gs://b/a"}}))
    kept = native("gcloud ai-platform jobs submit training J --config job.yaml", ctx)
    assert (kept["name"], kept["image"], kept["args"]) == ("J", "old", ["--from-file", "--job-dir=gs://b/a"])
    over = native("gcloud ai-platform jobs submit training J --config job.yaml --master-image-uri new "
                  "--worker-machine-type n2 --worker-count 3 --job-dir gs://b/z -- --x", ctx)
    assert (over["image"], over["args"], over["output_dir"]) == ("new", ["--x", "--job-dir=gs://b/z"], "gs://b/z")
    assert over["pools"]["worker"] == {"replicas": 3, "machine": {"machine_type": "n2"}}


# -- errors: one line, naming the flag, with a did-you-mean -------------------------------------------------------

BAD = [
    ("unknown-flag", f"ai custom-jobs create --worker-pool-specs={POOL}", "--worker-pool-specs",
     "unknown flag; did you mean --worker-pool-spec?"),
    ("unknown-pool-key", "ai custom-jobs create --worker-pool-spec=machine-typ=n1", "--worker-pool-spec",
     "unknown key `machine-typ`; did you mean `machine-type`?"),
    ("unknown-command", "gcloud ai custom-job create", None, "did you mean `gcloud ai custom-jobs create`?"),
    ("aip-unknown-flag", "gcloud ai-platform jobs submit training j --master-image=i", "--master-image",
     "did you mean --master-image-uri?"),
    ("local-run-typo", "gcloud ai custom-jobs local-run --executor-image-uri=e --python-modul=m", "--python-modul",
     "did you mean --python-module?"),
    ("no-pools", "gcloud ai custom-jobs create --display-name x", "--worker-pool-spec", "give --config FILE"),
    ("no-machine-type", "gcloud ai custom-jobs create --worker-pool-spec=container-image-uri=i",
     "--worker-pool-spec (#1)", "machine-type"),
    ("both-images", f"gcloud ai custom-jobs create --worker-pool-spec={POOL},container-image-uri=i,"
     "executor-image-uri=e", "--worker-pool-spec (#1)", "exactly one of keys"),
    ("package-without-uris", f"gcloud ai custom-jobs create --worker-pool-spec={POOL},executor-image-uri=e,"
     "python-module=m", "--python-package-uris", "is required"),
    ("bad-replica-count", f"gcloud ai custom-jobs create --worker-pool-spec={POOL},replica-count=two,"
     "container-image-uri=i", "--worker-pool-spec replica-count", "not a whole number"),
    ("chief-replicas", f"gcloud ai custom-jobs create --worker-pool-spec={POOL},replica-count=2,container-image-uri=i",
     "--worker-pool-spec (#1)", "pool 0 is the chief"),
    ("create-dash-args", f"gcloud ai custom-jobs create --worker-pool-spec={POOL},container-image-uri=i -- --x",
     "--", "--args=A,B"),
    ("aip-no-job", "gcloud ai-platform jobs submit training --master-image-uri i", "JOB", "is missing"),
    ("aip-half-worker-group", "gcloud ai-platform jobs submit training j --master-image-uri i --worker-count 2",
     "--worker-count", "only together with --worker-machine-type"),
    ("missing-value", "gcloud ai-platform jobs submit training j --region", "--region", "needs a value"),
]


@pytest.mark.parametrize("line,field,message", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_command_line_is_one_line_error(ctx, line, field, message):
    with pytest.raises(SpecError) as info:
        parse_command(words(line), cwd=ctx)
    text = str(info.value)
    assert message in text and "\n" not in text, text
    assert info.value.field == field, text


def test_cli_unknown_flag_exit_2_one_line(ctx, mw_home):
    proc = subprocess.run([sys.executable, "-m", "multiworker", "gcloud", "ai", "custom-jobs", "create",
                           "--regoin", "us-central1"], capture_output=True, text=True, cwd=ctx)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "error: gcloud ai custom-jobs create: --regoin: unknown flag; did you mean --region?\n"


def test_looks_like_gcloud():
    assert looks_like_gcloud(["gcloud", "ai-platform"]) and looks_like_gcloud(["beta", "ai", "custom-jobs", "create"])
    assert not looks_like_gcloud(["job.yaml"])


# -- round trips: gcloud line -> native -> Vertex AI / AI Platform config --------------------------------------

ROUND_TRIP = [
    ("vertex", f"gcloud ai custom-jobs create --display-name=mnist --worker-pool-spec={POOL},container-image-uri=m:1 "
               f"--worker-pool-spec={POOL},replica-count=2,container-image-uri=m:1 --args=--epochs=2"),
    ("aiplatform", "gcloud ai-platform jobs submit training mnist --scale-tier custom --master-image-uri m:1 "
                   "--master-machine-type n1 --worker-machine-type n1 --worker-count 2 --use-chief-in-tf-config "
                   "--job-dir gs://b/out -- --epochs 2"),
]


@pytest.mark.parametrize("to,line", ROUND_TRIP, ids=[r[0] for r in ROUND_TRIP])
def test_round_trip_gcloud_to_native_to_config(ctx, to, line):
    parsed = parse_command(words(line), cwd=ctx).parsed
    direct = spec_from_dict(parsed.native, source="line")
    native_doc, _ = convert(copy.deepcopy(parsed), "native", source="line")
    again = parse_job(ctx / "n.yaml", format="native", data=native_doc)
    doc, _ = convert(again, to, source="n.yaml")
    back = spec_from_dict(parse_job(ctx / "c.yaml", format=to, data=copy.deepcopy(doc)).native, source="c")
    assert back.model_dump(exclude={"name"}) == direct.model_dump(exclude={"name"})
    assert tf_configs(back) == tf_configs(direct)


def test_convert_cli_takes_a_gcloud_line(ctx, mw_home):
    out = ctx / "vertex.yaml"
    line = ISSUE_CREATE.replace("executor-image-uri=IMG,python-module=trainer.task", "container-image-uri=IMG")
    line = line.replace("--python-package-uris=gs://B/trainer-0.1.tar.gz ", "")
    proc = subprocess.run([sys.executable, "-m", "multiworker", "convert", "--to", "vertex", "-o", str(out), "--",
                           *shlex.split(line)[2:]], capture_output=True, text=True, cwd=ctx)
    assert proc.returncode == 0, proc.stderr
    doc = yaml.safe_load(out.read_text())
    assert doc["displayName"] == "J"
    assert [p["replicaCount"] for p in doc["jobSpec"]["workerPoolSpecs"]] == [1, 2]
    assert "note: --map-path: for runs only, not part of the converted job" in proc.stderr
    assert "note: not carried over (scheduling and placement settings): --region" in proc.stderr


# -- the tutorials' configs and the MNIST example ---------------------------------------------------------------

def test_legacy_tfjob_run_policy_under_spec(tmp_path):
    """A Kubeflow 1.0-era TFJob (cleanPodPolicy under spec): read with a note; convert writes runPolicy."""
    doc = yaml.safe_load(textwrap.dedent("""\
        apiVersion: kubeflow.org/v1
        kind: TFJob
        metadata: {name: multi-worker}
        spec:
          cleanPodPolicy: None
          backoffLimit: 2
          activeDeadlineSeconds: 600
          ttlSecondsAfterFinished: 60
          tfReplicaSpecs:
            Worker: {replicas: 3, template: {spec: {containers: [{name: tensorflow, image: mnist, args: [--x]}]}}}
    """))
    parsed = parse_job(tmp_path / "tfjob.yaml", data=doc)
    assert parsed.native["run_policy"] == {"restart_policy": "Never", "backoff_limit": 2, "active_deadline": 600}
    assert any(n.startswith("spec.cleanPodPolicy, spec.backoffLimit, spec.activeDeadlineSeconds, "
                            "spec.ttlSecondsAfterFinished: run policy directly under spec") for n in parsed.notes)
    out, _ = convert(parsed, "tfjob", source="tfjob.yaml")
    assert out["spec"]["runPolicy"] == {"backoffLimit": 2, "activeDeadlineSeconds": 600}
    assert not {"cleanPodPolicy", "backoffLimit", "activeDeadlineSeconds"} & set(out["spec"])


@pytest.mark.parametrize("to,primary", [("vertex", "Vertex AI's chief"), ("aiplatform", "AI Platform's master")])
def test_mnist_example_converts_with_worker_0_as_primary(to, primary):
    parsed = parse_job(MNIST / "job.yaml")
    doc, notes = convert(parsed, to, source="job.yaml", image="gcr.io/p/mnist:1")
    assert any(f"worker 0 becomes {primary} (its first pool) and 1 worker(s) remain" in n for n in notes), notes
    back = spec_from_dict(parse_job(MNIST / "c.yaml", format=to, data=copy.deepcopy(doc)).native, source="c")
    assert back.replica_counts() == {"chief": 1, "worker": 1}
    configs = tf_configs(back)  # what the cloud gives: `chief` (MultiWorkerMirroredStrategy: one more worker)
    assert configs["chief-0"] == {"cluster": {"chief": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001"]},
                                  "task": {"type": "chief", "index": 0}, "environment": "cloud"}
    assert configs["worker-0"]["task"] == {"type": "worker", "index": 0}
    assert all(back.resolved(r).module == "trainer.task" for r in ("chief", "worker"))
    assert ReplicaId("chief", 0) in replica_ids(back)
