"""Load the job (any format, nothing localized), find the trainer's source, run every check."""

from __future__ import annotations

import ast
import datetime
import importlib.metadata
import importlib.util
import json
import re
from pathlib import Path

from multiworker.containers.vertex_images import end_of_availability, prebuilt_tf_minor
from multiworker.doctor._findings import Finding, SourceFile, TrainerSource
from multiworker.doctor._source_checks import check_source
from multiworker.errors import UserError
from multiworker.spec.formats import LoadOptions, load_job
from multiworker.spec.load import LoadedSpec
from multiworker.spec.model import JobSpec

__all__ = ["diagnose", "diagnose_gcloud", "diagnose_loaded", "trainer_source"]

#: variables the platforms (Vertex AI, TFJob, JobSet, multiworker) set in every replica
PLATFORM_VARS = ("TF_CONFIG", "CLUSTER_SPEC", "MULTIWORKER_JOB_ID", "MULTIWORKER_ATTEMPT", "MULTIWORKER_REPLICA")
PLATFORM_PREFIXES = ("AIP_", "CLOUD_ML_")
GCS_PACKAGE = "tensorflow-io-gcs-filesystem"
_MAX_FILES = 200


def diagnose(spec_file: Path, *, fmt: str | None = None, source: Path | None = None,
             today: datetime.date | None = None) -> tuple[list[Finding], list[str]]:
    """(findings, notes) for the job in ``spec_file``; ``source``: the trainer's directory or file when
    the spec does not say where it is (a container image's code)."""
    loaded = load_job(spec_file, LoadOptions(format=fmt, check=False))
    return diagnose_loaded(loaded, spec_file, _read(spec_file), source=source, today=today)


def diagnose_gcloud(line: list[str], *, source: Path | None = None,
                    today: datetime.date | None = None) -> tuple[list[Finding], list[str]]:
    """The same for a pasted gcloud training command (its --config file, if any, read too)."""
    from multiworker.spec.formats.gcloud import load_command

    loaded, job = load_command(line, cwd=Path.cwd(), check=False)
    where = job.config or Path("<gcloud line>")
    text = (_read(job.config) if job.config else "") + "\n" + " ".join(line)
    return diagnose_loaded(loaded, where, text, source=source, today=today)


def diagnose_loaded(loaded: LoadedSpec, spec_file: Path, spec_text: str, *, source: Path | None = None,
                    today: datetime.date | None = None) -> tuple[list[Finding], list[str]]:
    spec = loaded.spec
    notes: list[str] = []
    src = trainer_source(loaded, source, notes)
    counts = spec.replica_counts()
    workers = counts.get("chief", 0) + counts.get("worker", 0)
    env_keys = {k for pool in counts for k in (spec.resolved(pool).env or {})}
    legacy = any((spec.resolved(pool).env or {}).get("TF_USE_LEGACY_KERAS") in ("1", "true", "True") for pool in counts)
    findings: list[Finding] = []
    if src is not None:
        findings += check_source(src, workers=workers, chief_type=spec.chief_task_type, legacy_keras_env=legacy,
                                 tf_distribute=spec.framework == "tensorflow")
    findings += _env_overrides(spec, spec_file, spec_text, env_keys)
    findings += _evaluator_in_spec_tf_config(spec, spec_file, spec_text)
    findings += _gcs_paths(spec, spec_file, spec_text, src)
    findings += _expired_images(spec, spec_file, spec_text, today or datetime.date.today())
    findings.sort(key=lambda f: (f.file, f.line, f.code))
    return findings, notes


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def trainer_source(loaded: LoadedSpec, source: Path | None, notes: list[str]) -> TrainerSource | None:
    """The trainer's files: the module's package (``trainer`` of ``trainer.task``) or the script."""
    spec = loaded.spec
    pool = next(iter(spec.replica_counts()), None)
    program = spec.resolved(pool) if pool else None
    root = loaded.base_dir / ((program.working_dir if program else None) or ".")
    paths: list[Path] = []
    if source is not None:
        root = source if source.is_dir() else source.parent
        paths = sorted(source.rglob("*.py")) if source.is_dir() else [source]
    elif program is not None and program.module:
        top = program.module.split(".")[0]
        package, single = root / top, root / f"{top}.py"
        paths = sorted(package.rglob("*.py")) if package.is_dir() else [single] if single.is_file() else []
    elif program is not None and program.command:
        paths = [root / a for a in program.command if a.endswith(".py") and (root / a).is_file()]
    if not paths:
        notes.append("the trainer's source was not found here (a container image's code?): only the spec was "
                      "checked; give the trainer's directory with --source")
        return None
    files = []
    for path in paths[:_MAX_FILES]:
        text = _read(path)
        try:
            tree = ast.parse(text, filename=str(path))
        except SyntaxError as exc:
            notes.append(f"{path}:{exc.lineno}: not valid Python ({exc.msg}); skipped")
            continue
        files.append(SourceFile(path, text, tree))
    return TrainerSource(root, files)


def _line_of(text: str, *needles: str) -> int:
    for number, line in enumerate(text.splitlines(), 1):
        if any(n in line for n in needles):
            return number
    return 1


def _env_overrides(spec: JobSpec, spec_file: Path, text: str, keys: set[str]) -> list[Finding]:
    out = []
    for key in sorted(keys):
        if key in PLATFORM_VARS or key.startswith(PLATFORM_PREFIXES):
            out.append(Finding("env-overrides-platform", str(spec_file), _line_of(text, key),
                               f"the spec's env sets {key}, which the platform sets in every replica: this value "
                               "replaces the platform's (locally multiworker's own wins for some), so the job runs "
                               "differently here and there",
                               f"remove {key} from env; read the platform's value in the trainer"))
    return out


def _evaluator_in_spec_tf_config(spec: JobSpec, spec_file: Path, text: str) -> list[Finding]:
    for pool in spec.replica_counts():
        raw = (spec.resolved(pool).env or {}).get("TF_CONFIG")
        try:
            cluster = json.loads(raw).get("cluster", {}) if raw else {}
        except (ValueError, AttributeError):
            continue
        if isinstance(cluster, dict) and "evaluator" in cluster:
            return [Finding("evaluator-in-cluster", str(spec_file), _line_of(text, "TF_CONFIG"),
                            "the TF_CONFIG in the spec's env puts the evaluator inside the cluster map",
                            "leave 'evaluator' out of 'cluster' (better: let the platform set TF_CONFIG)")]
    return []


def _gcs_installed(src: TrainerSource | None) -> bool:
    if importlib.util.find_spec("tensorflow_io_gcs_filesystem") is not None:
        return True
    try:
        major, minor = (int(x) for x in importlib.metadata.version("tensorflow").split(".")[:2])
        if (major, minor) < (2, 20):
            return True  # bundled before TensorFlow 2.20
    except (importlib.metadata.PackageNotFoundError, ValueError):
        pass
    if src is not None:  # required by the trainer's own packaging
        for name in ("requirements.txt", "setup.py", "pyproject.toml", "setup.cfg"):
            for where in (src.root, src.root.parent):
                if GCS_PACKAGE in _read(where / name):
                    return True
    return False


_GS = re.compile(r"gs://[^\s'\"]*")


def _gcs_paths(spec: JobSpec, spec_file: Path, text: str, src: TrainerSource | None) -> list[Finding]:
    where: tuple[str, int] | None = None
    if m := _GS.search(text):
        where = (str(spec_file), text.count("\n", 0, m.start()) + 1)
    elif src is not None:
        for f in src.files:
            for node in ast.walk(f.tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("gs://"):
                    where = (f.name, node.lineno)
                    break
            if where:
                break
    if where is None or _gcs_installed(src):
        return []
    return [Finding("gcs-without-package", where[0], where[1],
                    f"a gs:// path, and {GCS_PACKAGE} is not installed: since TensorFlow 2.20 tf.io.gfile (and "
                    "Keras, tf.data, checkpoints) cannot open gs:// without it ('File system scheme gs not "
                    "implemented')",
                    f"pip install {GCS_PACKAGE} (and add it to the image's or the package's requirements)")]


def _expired_images(spec: JobSpec, spec_file: Path, text: str, today: datetime.date) -> list[Finding]:
    images = {spec.image} | {spec.resolved(pool).image for pool in spec.replica_counts()}
    out = []
    for image in sorted(i for i in images if i):
        minor = prebuilt_tf_minor(image)
        end = end_of_availability(minor) if minor is not None else None
        if end is not None and end <= today:
            out.append(Finding("expired-image", str(spec_file), _line_of(text, image),
                               f"{image} is a Vertex AI prebuilt image past its end of availability ({end}): Vertex "
                               "refuses jobs that use it",
                               "move to a supported prebuilt image (Vertex AI's 'supported frameworks' page) or "
                               "your own image"))
    return out


def check_spec_file(path: Path) -> None:
    """A one-line error for a spec file that cannot be read at all."""
    if not path.is_file():
        raise UserError(f"{path}: no such file; give the job's spec (job.yaml, a Vertex or TFJob config)")
