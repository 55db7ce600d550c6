"""A corpus of hostile and malformed inputs across every format and flag: each is exit 2 with one line
naming the file or the flag, no traceback, and nothing written to MULTIWORKER_HOME.

Runs the real CLI entry point in-process (``multiworker.cli.main``), which is what the console script calls.
"""

from __future__ import annotations

import io
import os
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from multiworker import cli

HERE = Path(__file__).resolve().parent
CLOUD = HERE.parent / "fixtures" / "cloud"

BASE = "name: job\nmodule: trainer.task\nworking_dir: .\n"
POOLS = "pools: {worker: {replicas: 2}}\n"

# (id, spec body) run through `validate` and `run`: every one must be refused before anything starts.
NATIVE = [
    ("pools-list", BASE + "pools: [worker, chief]\n"),
    ("pools-scalar", BASE + "pools: 5\n"),
    ("pools-null", BASE + "pools:\n"),
    ("args-int", BASE + POOLS + "args: 5\n"),
    ("args-bool", BASE + POOLS + "args: true\n"),
    ("args-unterminated", BASE + POOLS + "args: \"--x 'unclosed\"\n"),
    ("command-unterminated", "name: job\ncommand: \"python 'x\"\n" + POOLS),
    ("command-empty-list", "name: job\ncommand: []\n" + POOLS),
    ("command-missing-binary", "name: job\ncommand: [no-such-binary-xyz]\n" + POOLS),
    ("command-missing-path", "name: job\ncommand: [./nope.sh]\n" + POOLS),
    ("env-name-equals", BASE + POOLS + "env: {'A=B': x}\n"),
    ("env-nul-value", BASE + POOLS + "env: {A: \"x\\0y\"}\n"),
    ("env-list", BASE + POOLS + "env: [A, B]\n"),
    ("env-nested", BASE + POOLS + "env: {A: {b: 1}}\n"),
    ("args-nul", BASE + POOLS + "args: [\"a\\0b\"]\n"),
    ("output-dev-null", BASE + POOLS + "output_dir: /dev/null\n"),
    ("output-under-file", BASE + POOLS + "output_dir: /dev/null/x\n"),
    ("grace-inf", BASE + POOLS + "run_policy: {grace_period: .inf}\n"),
    ("deadline-nan", BASE + POOLS + "run_policy: {active_deadline: .nan}\n"),
    ("backoff-neg-inf", BASE + POOLS + "run_policy: {backoff: -.inf}\n"),
    ("evaluator-timeout-str-inf", BASE + POOLS + "run_policy: {evaluator_timeout: inf}\n"),
    ("replicas-true", BASE + "pools: {worker: {replicas: true}}\n"),
    ("replicas-float", BASE + "pools: {worker: {replicas: 2.5}}\n"),
    ("replicas-string", BASE + "pools: {worker: {replicas: two}}\n"),
    ("replicas-huge", BASE + "pools: {worker: {replicas: 1000000000}}\n"),
    ("replicas-5000", BASE + "pools: {worker: {replicas: 5000}}\n"),
    ("replicas-negative", BASE + "pools: {worker: {replicas: -3}}\n"),
    ("duplicate-key", BASE + POOLS + "name: other\n"),
    ("duplicate-nested-key", BASE + "pools: {worker: {replicas: 2, replicas: 3}}\n"),
    ("unknown-key", BASE + POOLS + "replicas: 2\n"),
    ("unknown-role", BASE + "pools: {master: {}}\n"),
    ("two-chiefs", BASE + "pools: {chief: {replicas: 2}}\n"),
    ("two-evaluators", BASE + "pools: {worker: {}, evaluator: {replicas: 2}}\n"),
    ("ps-no-chief", BASE + "pools: {worker: {}, ps: {}}\n"),
    ("no-workers", BASE + "pools: {evaluator: {}}\n"),
    ("empty-pools", BASE + "pools: {}\n"),
    ("name-int", "name: 123\nmodule: trainer.task\n" + POOLS),
    ("name-long", "name: " + "a" * 80 + "\nmodule: trainer.task\n" + POOLS),
    ("name-slash", "name: a/b\nmodule: trainer.task\n" + POOLS),
    ("name-empty", "name: ''\nmodule: trainer.task\n" + POOLS),
    ("module-and-command", BASE + "command: [python]\n" + POOLS),
    ("module-missing", "name: job\nmodule: nope.nothing\n" + POOLS),
    ("module-int", "name: job\nmodule: 5\n" + POOLS),
    ("working-dir-missing", "name: job\nmodule: trainer.task\nworking_dir: nowhere\n" + POOLS),
    ("working-dir-file", "name: job\nmodule: trainer.task\nworking_dir: job.yaml\n" + POOLS),
    ("threads-zero", BASE + POOLS + "threads_per_replica: 0\n"),
    ("threads-str", BASE + POOLS + "threads_per_replica: many\n"),
    ("restart-policy-bad", BASE + POOLS + "run_policy: {restart_policy: Sometimes}\n"),
    ("backoff-limit-neg", BASE + POOLS + "run_policy: {backoff_limit: -1}\n"),
    ("success-policy-bad", BASE + POOLS + "run_policy: {success_policy: any}\n"),
    ("duration-words", BASE + POOLS + "run_policy: {active_deadline: three weeks}\n"),
    ("duration-negative", BASE + POOLS + "run_policy: {grace_period: -5}\n"),
    ("duration-bool", BASE + POOLS + "run_policy: {grace_period: true}\n"),
    ("run-policy-list", BASE + POOLS + "run_policy: [Never]\n"),
    ("chief-task-type-bad", BASE + POOLS + "chief_task_type: boss\n"),
    ("machine-nested", BASE + "pools: {worker: {machine: {a: {b: c}}}}\n"),
    ("not-mapping-list", "- a\n- b\n"),
    ("not-mapping-scalar", "just text\n"),
    ("empty-file", ""),
    ("only-comment", "# nothing\n"),
    ("bad-yaml-bracket", "name: [unclosed\n"),
    ("bad-yaml-indent", "name: job\n  pools: x\n bad: y\n"),
    ("bad-yaml-tab", "name: job\n\tpools: {}\n"),
    ("yaml-python-tag", "name: !!python/object/apply:os.system ['true']\n" + POOLS),
    ("yaml-binary-tag", "name: !!binary aGVsbG8=\n" + POOLS),
    ("alias-bomb", "a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
                   "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
                   "f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]\ng: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]\n"),
    ("deep-nesting", "a: " + "[" * 20000 + "]" * 20000 + "\n"),
    ("deep-mapping", "a: " + "{b: " * 5000 + "1" + "}" * 5000 + "\n"),
    ("json-bad", '{"name": "job", "pools": {'),
    ("json-array", '["name", "job"]'),
    # cloud formats
    ("vertex-empty-pools", "workerPoolSpecs: []\n"),
    ("vertex-pool-scalar", "workerPoolSpecs: [5]\n"),
    ("vertex-replicas-str", "workerPoolSpecs: [{machineSpec: {machineType: n1}, replicaCount: many, "
                            "containerSpec: {imageUri: img}}]\n"),
    ("vertex-unknown-key", "workerPoolSpecs: [{machineSpec: {machineType: n1}, replicaCount: 1, "
                           "containerSpec: {imageUri: img}, replicaCont: 2}]\n"),
    ("vertex-no-program", "workerPoolSpecs: [{machineSpec: {machineType: n1}, replicaCount: 1}]\n"),
    ("vertex-args-map", "workerPoolSpecs: [{machineSpec: {machineType: n1}, replicaCount: 1, "
                        "containerSpec: {imageUri: img, args: {a: 1}}}]\n"),
    ("vertex-unmapped-image", "workerPoolSpecs: [{machineSpec: {machineType: n1}, replicaCount: 1, "
                              "containerSpec: {imageUri: img}}]\n"),
    ("vertex-env-bad", "workerPoolSpecs: [{machineSpec: {machineType: n1}, replicaCount: 1, "
                       "containerSpec: {imageUri: img, env: [{value: x}]}}]\n"),
    ("aip-worker-count-str", "trainingInput: {scaleTier: CUSTOM, masterType: n1, workerCount: lots, "
                             "masterConfig: {imageUri: img}}\n"),
    ("aip-unknown-key", "trainingInput: {scaleTier: CUSTOM, masterType: n1, mastrConfig: {imageUri: img}}\n"),
    ("aip-no-program", "trainingInput: {scaleTier: CUSTOM, masterType: n1}\n"),
    ("aip-input-list", "trainingInput: [1, 2]\n"),
    ("aip-package-missing", "trainingInput: {scaleTier: BASIC, packageUris: [./nope.tar.gz], pythonModule: t.task}\n"),
    ("aip-package-dev-null", "trainingInput: {scaleTier: BASIC, packageUris: [/dev/null], pythonModule: t.task}\n"),
    ("aip-package-gs-unmapped", "trainingInput: {scaleTier: BASIC, packageUris: [gs://b/t.tar.gz], pythonModule: t.task}\n"),
    ("tfjob-no-replicas", "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\nspec: {tfReplicaSpecs: {}}\n"),
    ("tfjob-name-int", "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: 123}\nspec: {tfReplicaSpecs: "
                       "{Worker: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: i}]}}}}}\n"),
    ("tfjob-generate-name-int", "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {generateName: 7}\nspec: "
                                "{tfReplicaSpecs: {Worker: {replicas: 1, template: {spec: {containers: "
                                "[{name: tensorflow, image: i}]}}}}}\n"),
    ("tfjob-gpu-superscript", "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\nspec: {tfReplicaSpecs: "
                              "{Worker: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: i, "
                              "resources: {limits: {nvidia.com/gpu: \"²\"}}}]}}}}}\n"),
    ("tfjob-no-tensorflow-container", "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\nspec: "
                                      "{tfReplicaSpecs: {Worker: {replicas: 1, template: {spec: {containers: "
                                      "[{name: main, image: i}]}}}}}\n"),
    ("tfjob-two-chiefs", "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\nspec: {tfReplicaSpecs: "
                         "{Chief: {replicas: 2, template: {spec: {containers: [{name: tensorflow, image: i}]}}}}}\n"),
    ("tfjob-unknown-role", "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\nspec: {tfReplicaSpecs: "
                           "{Boss: {replicas: 1, template: {spec: {containers: [{name: tensorflow, image: i}]}}}}}\n"),
    ("tfjob-replicas-str", "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\nspec: {tfReplicaSpecs: "
                           "{Worker: {replicas: x, template: {spec: {containers: [{name: tensorflow, image: i}]}}}}}\n"),
    ("tfjob-spec-list", "apiVersion: kubeflow.org/v1\nkind: TFJob\nmetadata: {name: x}\nspec: []\n"),
    ("tfjob-wrong-api", "apiVersion: kubeflow.org/v9\nkind: TFJob\nmetadata: {name: x}\nspec: {}\n"),
]

# (id, argv after the spec path) against a valid spec: every flag's bad forms.
FLAGS = [
    ("set-no-equals", ["--set", "pools.worker.replicas"]),
    ("set-empty-key", ["--set", "=3"]),
    ("set-pools-scalar", ["--set", "pools=5"]),
    ("set-args-int", ["--set", "args=5"]),
    ("set-args-bool", ["--set", "args=true"]),
    ("set-through-scalar", ["--set", "name.x=1"]),
    ("set-replicas-bool", ["--set", "pools.worker.replicas=true"]),
    ("set-replicas-huge", ["--set", "pools.worker.replicas=100000"]),
    ("set-unknown-field", ["--set", "pool.worker.replicas=2"]),
    ("set-grace-inf", ["--set", "run_policy.grace_period=.inf"]),
    ("set-deadline-nan", ["--set", "run_policy.active_deadline=.nan"]),
    ("set-env-equals", ["--set", "env={'A=B': '1'}"]),
    ("set-bad-yaml", ["--set", "pools.worker={replicas: [}"]),
    ("format-unknown", ["--format", "xml"]),
    ("format-mismatch", ["--format", "tfjob"]),
    ("image-no-equals", ["--image", "gcr.io/x"]),
    ("image-empty-command", ["--image", "gcr.io/x="]),
    ("image-unterminated", ["--image", "gcr.io/x=python 'a"]),
    ("image-not-in-job", ["--image", "gcr.io/other=python -m x"]),
    ("map-path-no-equals", ["--map-path", "gs://b"]),
    ("map-path-not-gs", ["--map-path", "s3://b=./x"]),
    ("map-path-empty-local", ["--map-path", "gs://b="]),
    ("dockerfile-missing", ["--dockerfile", "nope/Dockerfile"]),
]

RUN_ONLY_FLAGS = [
    ("inject-no-at", ["--inject-failure", "worker-1"]),
    ("inject-nan", ["--inject-failure", "worker-0@nan"]),
    ("inject-inf", ["--inject-failure", "worker-0@inf"]),
    ("inject-tstp", ["--inject-failure", "worker-0@1s:TSTP"]),
    ("inject-preempt-bad-notice", ["--inject-failure", "worker-0@1s:PREEMPT=soon"]),
    ("inject-no-such-role", ["--inject-failure", "ps-*@1s"]),
    ("inject-unknown-signal", ["--inject-failure", "worker-0@1s:BOOM"]),
    ("inject-unknown-replica", ["--inject-failure", "worker-7@1s"]),
    ("inject-bad-role", ["--inject-failure", "boss-0@1s"]),
    ("inject-negative", ["--inject-failure", "worker-0@-1s"]),
    ("inject-words", ["--inject-failure", "worker-0@soon"]),
    ("unknown-option", ["--replicas", "3"]),
]

DOCKERFILES = [
    ("binary", b"\x00\x01\x02FROM x\n"),
    ("not-utf8", b"FROM x\nCMD ['\xff\xfe']\n"),
    ("env-unterminated", b'FROM x\nENV "x\nCMD ["python", "-m", "trainer.task"]\n'),
    ("copy-unterminated", b'FROM x\nCOPY "x\nCMD ["python", "-m", "trainer.task"]\n'),
    ("copy-json-ints", b'FROM x\nCOPY [1,2]\nCMD ["python", "-m", "trainer.task"]\n'),
    ("copy-absolute-glob", b'FROM x\nCOPY /etc/* /app/\nCMD ["python", "-m", "trainer.task"]\n'),
    ("copy-outside-context", b'FROM x\nCOPY ../secret /app/\nCMD ["python", "-m", "trainer.task"]\n'),
    ("copy-bad-json", b'FROM x\nCOPY ["a", \nCMD ["python", "-m", "trainer.task"]\n'),
    ("no-cmd", b"FROM x\nWORKDIR /app\n"),
    ("empty", b""),
    ("workdir-not-copied", b'FROM x\nWORKDIR /nowhere\nCMD ["python", "-m", "trainer.task"]\n'),
]

JOB_REFS = [
    ("status-empty", ["status", ""]),
    ("status-blank", ["status", "   "]),
    ("delete-empty", ["delete", ""]),
    ("cancel-empty", ["cancel", ""]),
    ("logs-empty", ["logs", ""]),
    ("describe-unknown", ["describe", "ffffffff"]),
    ("status-unknown", ["status", "nope"]),
    ("gc-no-unit", ["gc", "--older-than", "7"]),
    ("gc-words", ["gc", "--older-than", "a week"]),
    ("gc-nan", ["gc", "--older-than", "nan"]),
]


def run_cli(argv: list[str], capsys, monkeypatch) -> tuple[int, str, str]:
    """``multiworker ARGV`` in-process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["multiworker", *argv])
    monkeypatch.delenv("MULTIWORKER_DEBUG", raising=False)
    with pytest.raises(SystemExit) as info:
        cli.main()
    out, err = capsys.readouterr()
    code = info.value.code
    return (0 if code is None else code), out, err


def assert_refused(code: int, out: str, err: str, *, names: str, home: Path) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, out, err)
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ") or "Error" in lines[0] or "Usage" in err, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert names in lines[0], (names, lines[0])
    assert not list(home.iterdir()), f"written to the home: {list(home.iterdir())}"


@pytest.mark.parametrize("command", ["validate", "run"])
@pytest.mark.parametrize("body", [c[1] for c in NATIVE], ids=[c[0] for c in NATIVE])
def test_bad_spec_files(project, body, command, capsys, monkeypatch, mw_home):
    path = project / "job.yaml"
    path.write_text(body)
    code, out, err = run_cli([command, str(path)], capsys, monkeypatch)
    assert_refused(code, out, err, names=str(path), home=mw_home)


@pytest.mark.parametrize("argv", [c[1] for c in FLAGS], ids=[c[0] for c in FLAGS])
@pytest.mark.parametrize("command", ["validate", "run"])
def test_bad_flags(project, argv, command, capsys, monkeypatch, mw_home):
    path = project / "job.yaml"
    path.write_text(BASE + POOLS)
    code, out, err = run_cli([command, str(path), *argv], capsys, monkeypatch)
    names = argv[1] if argv[0] == "--dockerfile" else argv[0] if argv[0] in err else str(path)
    assert_refused(code, out, err, names=names, home=mw_home)


@pytest.mark.parametrize("argv", [c[1] for c in RUN_ONLY_FLAGS], ids=[c[0] for c in RUN_ONLY_FLAGS])
def test_bad_run_flags(project, argv, capsys, monkeypatch, mw_home):
    path = project / "job.yaml"
    path.write_text(BASE + POOLS)
    code, out, err = run_cli(["run", str(path), *argv], capsys, monkeypatch)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, (code, err)
    assert "Traceback" not in err
    assert argv[0] in err, err
    assert not list(mw_home.iterdir())
    if argv[0] == "--inject-failure":
        assert len(lines) == 1, err


@pytest.mark.parametrize("content", [c[1] for c in DOCKERFILES], ids=[c[0] for c in DOCKERFILES])
def test_bad_dockerfiles(project, content, capsys, monkeypatch, mw_home):
    dockerfile = project / "Dockerfile"
    dockerfile.write_bytes(content)
    spec = project / "vertex.yaml"
    spec.write_text("workerPoolSpecs: [{machineSpec: {machineType: n1}, replicaCount: 1, "
                    "containerSpec: {imageUri: img}}]\n")
    code, out, err = run_cli(["validate", str(spec), "--dockerfile", str(dockerfile)], capsys, monkeypatch)
    assert_refused(code, out, err, names=str(dockerfile), home=mw_home)


def _package(project: Path, kind: str) -> Path:
    path = project / {"not-zip": "t.whl", "truncated": "t.whl", "tar-link-out": "t.tar.gz",
                      "tar-absolute": "t.tar.gz", "zip-dotdot": "t.zip", "tar-device": "t.tar.gz",
                      "not-archive": "t.tar.gz"}[kind]
    if kind == "not-zip":
        path.write_bytes(b"this is not a zip")
    elif kind == "truncated":
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as zf:
            zf.writestr("t/__init__.py", "x" * 10000)
        path.write_bytes(buf.getvalue()[:200])
    elif kind == "zip-dotdot":
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr("../evil.py", "x")
    elif kind == "not-archive":
        path.write_bytes(os.urandom(64))
    else:
        with tarfile.open(path, "w:gz") as tf:
            ok = tarfile.TarInfo("t/ok.py")
            ok.size = 1
            tf.addfile(ok, io.BytesIO(b"x"))
            info = tarfile.TarInfo({"tar-link-out": "t/link", "tar-absolute": "/etc/evil",
                                    "tar-device": "t/dev"}[kind])
            if kind == "tar-link-out":
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            elif kind == "tar-device":
                info.type = tarfile.CHRTYPE
            else:
                info.size = 1
            tf.addfile(info, io.BytesIO(b"x") if info.isfile() else None)
    return path


@pytest.mark.parametrize("kind", ["not-zip", "truncated", "tar-link-out", "tar-absolute", "zip-dotdot",
                                  "tar-device", "not-archive"])
def test_bad_packages(project, kind, capsys, monkeypatch, mw_home):
    package = _package(project, kind)
    spec = project / "aip.yaml"
    spec.write_text(f"trainingInput: {{scaleTier: BASIC, packageUris: [{package}], pythonModule: t.task}}\n")
    code, out, err = run_cli(["validate", str(spec)], capsys, monkeypatch)
    assert code == 2, err
    assert str(package) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert not (mw_home / "packages").exists() or not any((mw_home / "packages").iterdir())


@pytest.mark.parametrize("argv", [c[1] for c in JOB_REFS], ids=[c[0] for c in JOB_REFS])
def test_bad_job_refs(argv, capsys, monkeypatch, mw_home, project):
    code, out, err = run_cli(argv, capsys, monkeypatch)
    assert code == 2, (code, out, err)
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_empty_job_ref_never_means_the_newest(project, capsys, monkeypatch, mw_home):
    """`delete ""` once deleted the newest job: only `last` means that."""
    from multiworker.job import Store

    store = Store(mw_home)
    store.create_job(job_id="abcd1234", name="keep", spec_json="{}")
    store.update_job("abcd1234", state="Succeeded")
    code, _, err = run_cli(["delete", ""], capsys, monkeypatch)
    assert code == 2 and "JOB is empty" in err
    assert Store(mw_home).has_job("abcd1234")


@pytest.mark.parametrize("where", ["missing-dir", "a-directory"])
@pytest.mark.parametrize("command", ["convert", "schema"])
def test_bad_output_paths(project, tmp_path, where, command, capsys, monkeypatch, mw_home):
    spec = project / "job.yaml"
    spec.write_text(BASE + POOLS)
    target = tmp_path / "nowhere" / "x.yaml" if where == "missing-dir" else tmp_path
    argv = ["convert", str(spec), "--to", "tfjob", "--image", "img", "-o", str(target)] if command == "convert" \
        else ["schema", "-o", str(target)]
    code, out, err = run_cli(argv, capsys, monkeypatch)
    assert code == 2 and "-o" in err and str(target) in err and "Traceback" not in err, err


def test_output_file_is_replaced_whole(tmp_path):
    from multiworker.outfile import write_output

    target = tmp_path / "out.yaml"
    target.write_text("old\n")
    write_output(target, "new\n")
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yaml"]


@pytest.mark.parametrize("case", ["home-is-file", "garbage-db", "home-unwritable"])
def test_bad_store(tmp_path, case, capsys, monkeypatch):
    home = tmp_path / "home"
    if case == "home-is-file":
        home.write_text("x")
    elif case == "garbage-db":
        home.mkdir()
        (home / "jobs.db").write_bytes(os.urandom(4096))
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere: an unwritable home cannot be made here")
        tmp_path.chmod(0o500)
        monkeypatch.setattr(tmp_path, "chmod", tmp_path.chmod)
    monkeypatch.setenv("MULTIWORKER_HOME", str(home))
    try:
        for argv in (["list"], ["status", "last"]):
            code, out, err = run_cli(argv, capsys, monkeypatch)
            assert code == 2 and err.startswith("error: ") and str(home) in err and "Traceback" not in err, err
    finally:
        tmp_path.chmod(0o700)
    if case == "garbage-db":
        assert (home / "jobs.db").stat().st_size == 4096  # left as it was for the user to look at


def test_dev_zero_and_big_files(project, capsys, monkeypatch, mw_home):
    code, out, err = run_cli(["validate", "/dev/zero"], capsys, monkeypatch)
    assert code == 2 and "/dev/zero" in err and "regular file" in err
    big = project / "big.yaml"
    big.write_text("# " + "x" * (5 << 20))
    code, out, err = run_cli(["validate", str(big)], capsys, monkeypatch)
    assert code == 2 and "larger than" in err


def test_home_and_files_are_private(project, mw_home, capsys, monkeypatch):
    from multiworker.job import Store

    home = mw_home / "fresh"
    Store(home)
    assert home.stat().st_mode & 0o777 == 0o700
    assert (home / "jobs.db").stat().st_mode & 0o077 == 0


def test_an_existing_open_home_is_made_private_but_a_shared_directory_is_left(tmp_path):
    from multiworker.job import Store

    home = tmp_path / "open"
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    Store(home)
    assert home.stat().st_mode & 0o777 == 0o700
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    Store(shared)
    assert shared.stat().st_mode & 0o7777 == 0o1777


def test_the_studies_database_is_private(tmp_path):
    pytest.importorskip("optuna")
    from multiworker.tune import search

    folder = search.studies_dir(tmp_path)
    folder.mkdir(mode=0o755)
    (folder / "studies.db").touch(mode=0o644)
    (folder / "studies.db").chmod(0o644)
    search.open_study(tmp_path, "s", _tiny_study(), resume=False)
    assert folder.stat().st_mode & 0o777 == 0o700
    assert {p.name: p.stat().st_mode & 0o777 for p in folder.iterdir()}["studies.db"] == 0o600


def _tiny_study():
    from multiworker.tune.model import Param, Study

    return Study(metric="loss", goal="MINIMIZE", max_trials=2,
                 params=(Param(name="lr", type="DOUBLE", min_value=0.1, max_value=1.0),))


def test_relative_home_is_made_absolute(tmp_path, monkeypatch):
    from multiworker.home import home_dir
    from multiworker.job import Store

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MULTIWORKER_HOME", "rel-home")
    assert home_dir() == tmp_path / "rel-home"
    assert Store().home.is_absolute()


def test_internal_error_is_one_line(monkeypatch, capsys):
    """Last line of defence: an unexpected exception prints one line with where the traceback went."""
    import multiworker.cli.spec_cmd as spec_cmd

    def boom(*_a, **_k):
        raise RuntimeError("unexpected\nsecond line")

    monkeypatch.setattr("multiworker.spec.model.JobSpec.model_json_schema", boom)
    code, out, err = run_cli(["schema"], capsys, monkeypatch)
    assert code == 1 and "internal error: RuntimeError: unexpected" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1
    assert spec_cmd  # imported: the command module is what raised


def test_describe_redacts_env_values():
    from multiworker.status import redact_env

    spec = {"env": {"API_KEY": "s3cret"}, "pools": {"worker": {"env": {"TOKEN": "t"}, "replicas": 2}}}
    out = redact_env(spec)
    assert "s3cret" not in str(out) and "'t'" not in str(out)
    assert set(out["env"]) == {"API_KEY"} and out["pools"]["worker"]["replicas"] == 2


def test_corpus_size():
    """The issue asks for at least 150 malformed inputs across formats and flags."""
    total = 2 * len(NATIVE) + 2 * len(FLAGS) + len(RUN_ONLY_FLAGS) + len(DOCKERFILES) + 7 + len(JOB_REFS) + 4 + 3 + 2
    assert total >= 150, total


def test_validate_does_not_unpack_packages(project, capsys, monkeypatch, mw_home):
    """A package is checked from its index: validate writes nothing, and a module it lacks is an error."""
    package = project / "t-0.1.tar.gz"
    with tarfile.open(package, "w:gz") as tf:
        for name, body in (("t-0.1/t/__init__.py", b""), ("t-0.1/t/task.py", b"print('hi')\n")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tf.addfile(info, io.BytesIO(body))
    spec = project / "aip.yaml"
    spec.write_text(f"trainingInput: {{scaleTier: BASIC, packageUris: [{package}], pythonModule: t.task}}\n")
    code, out, err = run_cli(["validate", str(spec)], capsys, monkeypatch)
    assert code == 0, err
    assert not (mw_home / "packages").exists()
    spec.write_text(f"trainingInput: {{scaleTier: BASIC, packageUris: [{package}], pythonModule: nope.task}}\n")
    code, out, err = run_cli(["validate", str(spec)], capsys, monkeypatch)
    assert code == 2 and "nope.task" in err, err


def test_a_read_only_home_can_still_be_listed(tmp_path, capsys, monkeypatch):
    """Read commands open a store they cannot write read-only; a write names the home and the fix."""
    from multiworker.job import Store

    home = tmp_path / "ro"
    store = Store(home)
    store.create_job(job_id="abcd1234", name="seen", spec_json="{}")
    store.update_job("abcd1234", state="Succeeded")
    store.close()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: False if str(p).startswith(str(home)) and mode & os.W_OK
                        else real_access(p, mode))
    monkeypatch.setenv("MULTIWORKER_HOME", str(home))
    assert Store(home).read_only
    code, out, err = run_cli(["list", "--json"], capsys, monkeypatch)
    assert code == 0 and "abcd1234" in out, err
    code, out, err = run_cli(["delete", "abcd1234"], capsys, monkeypatch)
    assert code == 2 and str(home) in err and "Traceback" not in err, err
