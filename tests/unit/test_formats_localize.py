"""Running cloud jobs here: images -> programs (--image, --dockerfile), gs:// -> dirs, packages -> a path."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from multiworker.errors import SpecError
from multiworker.spec.formats import LoadOptions, load_job
from multiworker.spec.formats.dockerfile import read_dockerfile
from multiworker.spec.formats.localize import PathMap, parse_images

CLOUD = Path(__file__).resolve().parents[1] / "fixtures" / "cloud"
VERTEX_IMAGE = "us-docker.pkg.dev/my-project/trainers/mnist:latest"
AIP_IMAGE = "gcr.io/my-project/mnist-trainer:latest"


@pytest.fixture
def ctx(tmp_path) -> Path:
    """A build context as the tutorials lay it out: Dockerfile + trainer/ package."""
    root = tmp_path / "ctx"
    (root / "trainer").mkdir(parents=True)
    (root / "trainer" / "__init__.py").write_text("")
    (root / "trainer" / "task.py").write_text("print('training')\n")
    (root / "Dockerfile").write_text((CLOUD / "Dockerfile").read_text())
    return root


def program(loaded, role: str) -> dict:
    p = loaded.spec.resolved(role)
    return {"module": p.module, "command": p.command, "args": p.args, "working_dir": p.working_dir}


# -- gs:// mapping -------------------------------------------------------------------

def test_path_map_longest_prefix_and_gcs_mount(tmp_path):
    paths = PathMap(["gs://b=./data", "gs://b/models=/srv/models"], cwd=tmp_path)
    m = lambda s: paths.map(s, source="f", field="x", strict=True)  # noqa: E731
    assert m("--data=gs://b/train.csv") == f"--data={tmp_path}/data/train.csv"
    assert m("gs://b/models/v1") == "/srv/models/v1"
    assert m("gs://b") == f"{tmp_path}/data"
    assert m("/gcs/b/x") == f"{tmp_path}/data/x"  # Vertex AI's Cloud Storage FUSE mount
    assert m("no cloud here") == "no cloud here"


def test_unmapped_gs_path_names_field_and_fix(tmp_path):
    with pytest.raises(SpecError) as info:
        load_job(CLOUD / "tfjob.yaml", LoadOptions(dockerfile=None, cwd=tmp_path))
    assert str(info.value) == (
        f"{CLOUD / 'tfjob.yaml'}: spec.tfReplicaSpecs.Worker.template.spec.containers[0].args: "
        "gs://my-bucket/saved_model_dir is a Cloud Storage path; map it to a local directory with "
        "--map-path gs://my-bucket=./local-dir"
    )


@pytest.mark.parametrize("item", ["gs://b", "b=./x", "gs://=./x", "s3://b=./x", "gs://b="])
def test_bad_map_path(tmp_path, item):
    with pytest.raises(SpecError, match=r"^--map-path: .*gs://BUCKET\[/PATH\]=LOCAL_DIR"):
        PathMap([item], cwd=tmp_path)


@pytest.mark.parametrize("item", ["gcr.io/x", "=python -m t", "gcr.io/x="])
def test_bad_image_option(item):
    with pytest.raises(SpecError, match=r"^--image: .*IMAGE=COMMAND"):
        parse_images([item])


# -- the tutorial fixtures, localized ----------------------------------------------------------

def test_vertex_with_image_mapping(ctx, tmp_path):
    options = LoadOptions(images=[f"{VERTEX_IMAGE}=python -m trainer.task"], map_paths=["gs://my-bucket=./gcs"],
                          cwd=ctx)
    loaded = load_job(CLOUD / "vertex_config.yaml", options)
    assert loaded.format == "vertex"
    assert loaded.spec.replica_counts() == {"chief": 1, "worker": 1}
    for role in ("chief", "worker"):
        assert program(loaded, role) == {"module": "trainer.task", "command": None,
                                         "args": ["--epochs=1", "--steps-per-epoch=3"], "working_dir": str(ctx)}
    assert loaded.spec.output_dir == str(ctx / "gcs" / "mnist-vertex")
    assert loaded.spec.pools["chief"].machine == {"machine_type": "n1-standard-4"}
    assert loaded.spec.chief_task_type == "chief"


def test_aiplatform_with_untagged_image_mapping(ctx):
    options = LoadOptions(images=["gcr.io/my-project/mnist-trainer=python -m trainer.task"],
                          map_paths=["gs://my-bucket=/data/gcs"], cwd=ctx)
    loaded = load_job(CLOUD / "aiplatform_config.yaml", options)
    assert loaded.spec.chief_task_type == "chief"  # useChiefInTfConfig: true
    assert program(loaded, "worker") == {
        "module": "trainer.task", "command": None, "working_dir": str(ctx),
        "args": ["--epochs", "1", "--steps-per-epoch", "3", "--job-dir=/data/gcs/mnist-aiplatform"]}
    assert loaded.notes == (
        "machine types, accelerators and disks do not apply locally (kept for conversions): "
        "trainingInput.masterType, trainingInput.workerType",
        "scheduling and placement settings do not apply locally: trainingInput.region",
    )


def test_aiplatform_master_when_use_chief_is_false(ctx):
    options = LoadOptions(overrides=["chief_task_type=master"], images=[f"{AIP_IMAGE}=python -m trainer.task"],
                          map_paths=["gs://my-bucket=./o"], cwd=ctx)
    loaded = load_job(CLOUD / "aiplatform_config.yaml", options)
    assert loaded.spec.chief_task_type == "master"


def test_tfjob_with_dockerfile(ctx):
    options = LoadOptions(dockerfile=str(ctx / "Dockerfile"), map_paths=["gs://my-bucket=./gcs"],
                          overrides=["pools.worker.replicas=2"], cwd=ctx)
    loaded = load_job(CLOUD / "tfjob.yaml", options)
    assert loaded.spec.replica_counts() == {"worker": 2}
    assert loaded.spec.run_policy.restart_policy == "Never"
    assert program(loaded, "worker") == {
        "module": "trainer.task", "command": None, "working_dir": str(ctx),
        "args": [f"--saved_model_path={ctx}/gcs/saved_model_dir", f"--checkpoint_path={ctx}/gcs/checkpoints",
                 "--epochs=1", "--steps-per-epoch=3"]}
    assert loaded.notes == ("cleanup and lifecycle settings do not apply locally: spec.runPolicy.cleanPodPolicy",)


def test_unmapped_image_says_how_to_map_it(ctx):
    with pytest.raises(SpecError) as info:
        load_job(CLOUD / "vertex_config.yaml", LoadOptions(map_paths=["gs://my-bucket=./o"], cwd=ctx))
    assert f"--image {VERTEX_IMAGE}='python -m trainer.task' or --dockerfile PATH" in str(info.value)
    assert "\n" not in str(info.value)


def test_image_option_for_another_image_is_an_error(ctx):
    with pytest.raises(SpecError, match=r"^--image: gcr.io/typo is not an image of this job \(its images: "):
        load_job(CLOUD / "vertex_config.yaml", LoadOptions(images=[f"{VERTEX_IMAGE}=python -m trainer.task",
                                                                   "gcr.io/typo=python x.py"],
                                                           map_paths=["gs://my-bucket=./o"], cwd=ctx))


def test_check_false_leaves_unmapped_things(ctx):
    loaded = load_job(CLOUD / "tfjob.yaml", LoadOptions(check=False, cwd=ctx))
    assert loaded.spec.resolved("worker").args[0] == "--saved_model_path=gs://my-bucket/saved_model_dir"
    assert loaded.spec.resolved("worker").module is None


def test_container_command_and_python_script(ctx, tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text(textwrap.dedent(f"""
        workerPoolSpecs:
          - replicaCount: 1
            containerSpec: {{imageUri: {VERTEX_IMAGE}, command: [python3, train.py], args: [--lr, "0.1"]}}
          - replicaCount: 2
            containerSpec: {{imageUri: {VERTEX_IMAGE}, command: [/bin/echo, hi]}}
    """))
    (ctx / "train.py").write_text("")
    loaded = load_job(path, LoadOptions(images=[f"{VERTEX_IMAGE}=ignored-entrypoint"], cwd=ctx))
    assert program(loaded, "chief") == {"module": None, "command": [sys.executable, "train.py"],
                                        "args": ["--lr", "0.1"], "working_dir": str(ctx)}
    assert program(loaded, "worker") == {"module": None, "command": ["/bin/echo"], "args": ["hi"],
                                         "working_dir": str(ctx)}


def test_native_spec_with_gs_paths_and_image(ctx):
    path = ctx / "job.yaml"
    path.write_text(f"name: n\nimage: {VERTEX_IMAGE}\nargs: [--data=gs://d/x]\npools: {{worker: {{replicas: 2}}}}\n")
    loaded = load_job(path, LoadOptions(images=[f"{VERTEX_IMAGE}=python -m trainer.task --verbose"],
                                        map_paths=["gs://d=./d"], cwd=ctx))
    assert loaded.format == "native"
    assert program(loaded, "worker") == {"module": "trainer.task", "command": None, "working_dir": str(ctx),
                                         "args": ["--verbose", f"--data={ctx}/d/x"]}


# -- Dockerfiles ------------------------------------------------------------------------

def dockerfile(ctx: Path, text: str) -> Path:
    path = ctx / "Dockerfile"
    path.write_text(textwrap.dedent(text))
    return path


def test_dockerfile_tutorial_form(ctx):
    df = read_dockerfile(ctx / "Dockerfile")
    assert (df.workdir, df.entrypoint, df.cmd) == ("/app", ["python", "-m", "trainer.task"], None)
    assert df.translate("/app") == ctx
    assert df.translate("/app/trainer/task.py") == ctx / "trainer" / "task.py"
    assert df.translate("/etc/passwd") is None
    assert df.argv(["--epochs", "1"]) == (["python", "-m", "trainer.task", "--epochs", "1"], False)


def test_dockerfile_file_by_file_into_workdir(ctx):
    """The published AI Platform tutorial's form: WORKDIR /root, each file copied to ./trainer/<file>
    (one with --chown, one into a ./ directory), ENTRYPOINT ["python"], CMD ["trainer/task.py"]."""
    (ctx / "trainer" / "model.py").write_text("")
    path = dockerfile(ctx, """
        FROM gcr.io/deeplearning-platform-release/tf2-cpu.2-8
        WORKDIR /root
        COPY trainer/__init__.py ./trainer/__init__.py
        COPY --chown=1000:1000 trainer/model.py ./trainer/model.py
        COPY trainer/task.py ./trainer/
        ENTRYPOINT ["python"]
        CMD ["trainer/task.py"]
    """)
    df = read_dockerfile(path)
    assert df.workdir == "/root" and df.translate("/root") == ctx
    # a path under the image's WORKDIR is the same file in the build context
    assert df.translate(f"{df.workdir}/trainer/task.py") == ctx / "trainer" / "task.py"
    assert df.argv([]) == (["python", "trainer/task.py"], False)
    job = ctx / "job.yaml"
    job.write_text("name: j\nimage: img\npools: {worker: {replicas: 1}}\n")
    loaded = load_job(job, LoadOptions(dockerfile=str(path), cwd=ctx))
    assert program(loaded, "worker") == {"module": None, "command": [sys.executable, "trainer/task.py"],
                                         "args": [], "working_dir": str(ctx)}


def test_dockerfile_entrypoint_cmd_and_multistage(ctx):
    path = dockerfile(ctx, """
        FROM python:3.11 AS build
        WORKDIR /build
        COPY . .
        ENTRYPOINT ["false"]

        FROM python:3.11-slim
        ARG APP=/srv/app
        WORKDIR ${APP}
        # the trainer package, copied relative to WORKDIR
        COPY trainer trainer
        COPY --from=build /build/wheel /wheels
        ENTRYPOINT ["python", \\
                    "-m", "trainer.task"]
        CMD ["--epochs", "2"]
    """)
    df = read_dockerfile(path)
    assert df.workdir == "/srv/app" and df.translate("/srv/app") == ctx
    assert df.argv([]) == (["python", "-m", "trainer.task", "--epochs", "2"], False)  # CMD = default args
    assert df.argv(["--epochs", "5"]) == (["python", "-m", "trainer.task", "--epochs", "5"], False)  # args replace it


def test_dockerfile_shell_forms(ctx):
    df = read_dockerfile(dockerfile(ctx, "FROM x\nCOPY . /app\nWORKDIR /app\nENTRYPOINT python -m trainer.task\n"))
    assert df.argv(["--x"]) == (["python", "-m", "trainer.task"], True)  # Docker ignores args here
    df = read_dockerfile(dockerfile(ctx, "FROM x\nCOPY . /app\nCMD python -m trainer.task && echo done\n"))
    assert df.argv([]) == (["/bin/sh", "-c", "python -m trainer.task && echo done"], False)


def test_dockerfile_paths_in_args_are_translated(ctx):
    dockerfile(ctx, """
        FROM x
        COPY . /opt/job
        WORKDIR /opt/job
        ENTRYPOINT ["python", "/opt/job/trainer/task.py", "--config=/opt/job/trainer/cfg.yaml"]
    """)
    path = ctx / "job.yaml"
    path.write_text("name: j\nimage: img\npools: {worker: {replicas: 1}}\n")
    loaded = load_job(path, LoadOptions(dockerfile=str(ctx), cwd=ctx))
    assert program(loaded, "worker") == {"module": None, "command": [sys.executable, f"{ctx}/trainer/task.py"],
                                         "args": [f"--config={ctx}/trainer/cfg.yaml"], "working_dir": str(ctx)}


def test_dockerfile_env_is_noted(ctx):
    path = dockerfile(ctx, """
        FROM x
        ENV PYTHONUNBUFFERED=1 MODE=train
        ENV LEGACY value with spaces
        COPY . /app
        WORKDIR /app
        ENTRYPOINT ["python", "-m", "trainer.task"]
    """)
    assert read_dockerfile(path).env == ["PYTHONUNBUFFERED", "MODE", "LEGACY"]
    options = LoadOptions(dockerfile=str(path), map_paths=["gs://my-bucket=./o"], cwd=ctx)
    loaded = load_job(CLOUD / "tfjob.yaml", options)
    assert f"{path}: ENV is not applied locally (PYTHONUNBUFFERED, MODE, LEGACY); set `env` in the spec if needed" \
        in loaded.notes


@pytest.mark.parametrize(
    "text,message",
    [
        ("FROM x\nCOPY . /app\n", "has no ENTRYPOINT or CMD"),
        ("FROM x\nWORKDIR /elsewhere\nCOPY trainer/ /app/trainer/\nENTRYPOINT [\"python\", \"-m\", \"trainer.task\"]\n",
         "WORKDIR: working directory /elsewhere is not copied from the build context"),
        ("FROM x\nWORKDIR /app\nCOPY missing/ /app/missing/\nENTRYPOINT [\"python\", \"-m\", \"trainer.task\"]\n",
         r"line 3: COPY missing/: not found in the build context"),
    ],
    ids=["no-entrypoint", "workdir-not-copied", "copy-source-missing"],
)
def test_dockerfile_errors(ctx, text, message):
    dockerfile(ctx, text)
    with pytest.raises(SpecError, match=message):
        load_job(CLOUD / "tfjob.yaml", LoadOptions(dockerfile=str(ctx / "Dockerfile"), map_paths=["gs://my-bucket=./o"],
                                                   cwd=ctx))


def test_missing_dockerfile(tmp_path):
    with pytest.raises(SpecError, match="no such Dockerfile"):
        read_dockerfile(tmp_path / "nope" / "Dockerfile")


# -- Python packages ----------------------------------------------------------------------

PACKAGE_JOB = """
workerPoolSpecs:
  - replicaCount: 1
    pythonPackageSpec:
      executorImageUri: us-docker.pkg.dev/vertex-ai/training/tf-cpu.2-12.py310:latest
      packageUris: {uris}
      pythonModule: trainer.task
      args: [--epochs, "1"]
"""


def _sdist(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tf:
        for name, text in (("trainer-0.1/setup.py", "from setuptools import setup\nsetup()\n"),
                           ("trainer-0.1/PKG-INFO", "Name: trainer\n"),
                           ("trainer-0.1/trainer/__init__.py", ""),
                           ("trainer-0.1/trainer/task.py", "print('sdist')\n")):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


def _wheel(path: Path, package: str) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{package}/__init__.py", "")
        zf.writestr(f"{package}-0.1.dist-info/METADATA", f"Name: {package}\n")
    return path


def test_package_from_source_dir(ctx, tmp_path):
    path = tmp_path / "pkg.yaml"
    path.write_text(PACKAGE_JOB.format(uris="[gs://b/src]"))
    loaded = load_job(path, LoadOptions(map_paths=[f"gs://b/src={ctx}"], cwd=tmp_path))
    assert program(loaded, "chief") == {"module": "trainer.task", "command": None, "args": ["--epochs", "1"],
                                        "working_dir": str(ctx)}


def test_package_from_sdist_and_wheel(tmp_path, mw_home):
    dist = tmp_path / "dist"
    dist.mkdir()
    _sdist(dist / "trainer-0.1.tar.gz")
    _wheel(dist / "helpers-0.1-py3-none-any.whl", "helpers")
    path = tmp_path / "pkg.yaml"
    path.write_text(PACKAGE_JOB.format(uris="[gs://b/trainer-0.1.tar.gz, gs://b/helpers-0.1-py3-none-any.whl]"))
    loaded = load_job(path, LoadOptions(map_paths=["gs://b=./dist"], cwd=tmp_path))
    prog = loaded.spec.resolved("chief")
    workdir = Path(prog.working_dir)
    assert workdir.parent.parent == mw_home / "packages" and workdir.name == "trainer-0.1"
    assert (workdir / "trainer" / "task.py").read_text() == "print('sdist')\n"
    helpers_root = prog.env["PYTHONPATH"].split(":")[0]
    assert (Path(helpers_root) / "helpers" / "__init__.py").exists()
    again = load_job(path, LoadOptions(map_paths=["gs://b=./dist"], cwd=tmp_path))  # unpacked once, reused
    assert again.spec.resolved("chief").working_dir == prog.working_dir


def test_package_without_the_module(tmp_path):
    _wheel(tmp_path / "other-0.1-py3-none-any.whl", "other")
    path = tmp_path / "pkg.yaml"
    path.write_text(PACKAGE_JOB.format(uris="[./other-0.1-py3-none-any.whl]"))
    with pytest.raises(SpecError, match=r"packageUris\[0\]: module 'trainer.task' is in none of the packages"):
        load_job(path, LoadOptions(cwd=tmp_path))


# -- through the CLI -------------------------------------------------------------------------

def test_cli_validate_cloud_config(ctx, mw_home):
    proc = subprocess.run([sys.executable, "-m", "multiworker", "validate", str(CLOUD / "tfjob.yaml"),
                           "--dockerfile", str(ctx / "Dockerfile"), "--map-path", "gs://my-bucket=./gcs"],
                          capture_output=True, text=True, cwd=ctx)
    assert proc.returncode == 0, proc.stderr
    assert "valid tfjob spec 'multi-worker': worker x3" in proc.stdout
    assert "note: cleanup and lifecycle settings do not apply locally: spec.runPolicy.cleanPodPolicy" in proc.stdout


def test_cli_unmapped_path_is_exit_2(ctx, mw_home):
    proc = subprocess.run([sys.executable, "-m", "multiworker", "validate", str(CLOUD / "tfjob.yaml"),
                           "--dockerfile", str(ctx / "Dockerfile")], capture_output=True, text=True, cwd=ctx)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "--map-path gs://my-bucket=./local-dir" in proc.stderr
