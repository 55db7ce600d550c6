"""Build a job's image and push it.

The image is built from the job's own Dockerfile, as it is (``--dockerfile``, or a ``Dockerfile`` next
to the spec), or from a generated one: a base that matches the local TensorFlow (the official
``tensorflow/tensorflow:<version>`` image, or ``--base`` with Python, where TensorFlow is installed
when missing), ``tf-keras`` without its dependencies (they would pull a second TensorFlow),
multiworker (this installation's package and its dependencies) and the job's working directory in
``/app``. The host's CA certificates are copied in so pip reaches PyPI behind a proxy that re-signs TLS.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import tempfile
import time
from importlib import metadata
from pathlib import Path

from multiworker.containers.engine import BUILDERS, Engine, find_engine, last_line
from multiworker.errors import UserError

__all__ = ["BuildPlan", "plan_build", "generated_dockerfile", "build_image", "push_image", "default_tag",
           "local_tf_version", "APP_DIR", "HOST_CA"]

APP_DIR = "/app"
HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")
_IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", ".git", ".venv", "venv", ".mypy_cache", ".pytest_cache",
                                 ".ruff_cache", "*.egg-info", "node_modules")
_GCP_REGISTRY = re.compile(r"^([a-z0-9-]+-docker\.pkg\.dev|([a-z]+\.)?gcr\.io)/")


def local_tf_version() -> str | None:
    try:
        return metadata.version("tensorflow")
    except metadata.PackageNotFoundError:
        return None


def default_tag(name: str, image: str | None) -> str:
    """The spec's own image, else ``<job name>:latest`` (lower case, as image names are)."""
    return image or f"{re.sub(r'[^a-z0-9._-]+', '-', name.lower()).strip('-._') or 'job'}:latest"


@dataclasses.dataclass
class BuildPlan:
    """What to build: the Dockerfile, its context, and whether multiworker generated it."""

    dockerfile: Path
    context: Path
    generated: bool
    base: str | None = None
    workdir: Path | None = None  # a generated image's /app comes from here


def generated_dockerfile(base: str, tf_version: str, requirements: list[str], *, ca: bool) -> str:
    """The Dockerfile multiworker writes for a job without one."""
    keras = f"tf-keras=={tf_version}"
    lines = [
        "# Written by `multiworker build`: the job's working directory in /app, with multiworker and",
        f"# TensorFlow {tf_version} (tf-keras without its dependencies: they would pull a second TensorFlow).",
        f"FROM {base}",
    ]
    if ca:
        lines += ["COPY host-ca-certificates.crt /etc/ssl/certs/host-ca-certificates.crt",
                  "ENV PIP_CERT=/etc/ssl/certs/host-ca-certificates.crt"]
    quoted = " ".join(f'"{r}"' for r in requirements)
    lines += [
        "ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PYTHONUNBUFFERED=1",
        f'RUN python -c "import tensorflow" 2>/dev/null || python -m pip install -q "tensorflow=={tf_version}"',
        f'RUN python -c "import tf_keras" 2>/dev/null || python -m pip install -q --no-deps "{keras}"',
        f"RUN python -m pip install -q {quoted}" if requirements else "",
        "COPY multiworker /opt/multiworker/multiworker",
        "ENV PYTHONPATH=/opt/multiworker",
        f"WORKDIR {APP_DIR}",
        f"COPY app/ {APP_DIR}/",
    ]
    return "\n".join(line for line in lines if line) + "\n"


def _requirements() -> list[str]:
    """multiworker's own dependencies (no extras): what ``multiworker.k8s_entry`` and the trainer import."""
    try:
        reqs = metadata.requires("multiworker") or []
    except metadata.PackageNotFoundError:
        return []
    return [r for r in reqs if "extra ==" not in r]


def plan_build(*, spec_dir: Path, workdir: Path, dockerfile: Path | None, base: str | None,
               staging: Path) -> BuildPlan:
    """The user's Dockerfile as it is (its directory the context), or a generated one in ``staging``."""
    if dockerfile is None and (spec_dir / "Dockerfile").is_file():
        dockerfile = spec_dir / "Dockerfile"
    if dockerfile is not None:
        dockerfile = dockerfile / "Dockerfile" if dockerfile.is_dir() else dockerfile
        if not dockerfile.is_file():
            raise UserError(f"--dockerfile {dockerfile}: no such file; give the Dockerfile or its directory")
        return BuildPlan(dockerfile=dockerfile, context=dockerfile.resolve().parent, generated=False)
    tf_version = local_tf_version()
    if tf_version is None and base is None:
        raise UserError("TensorFlow is not installed here, so no base image matches it: pass --base IMAGE "
                        "(an image with Python and TensorFlow)")
    tf_version = tf_version or "2.21.0"
    base = base or f"tensorflow/tensorflow:{tf_version}"
    if not workdir.is_dir():
        raise UserError(f"{workdir}: the job's working directory does not exist; set working_dir in the spec")
    shutil.copytree(workdir, staging / "app", ignore=_IGNORE, symlinks=False)
    package = Path(__file__).resolve().parents[1]
    shutil.copytree(package, staging / "multiworker", ignore=_IGNORE)
    ca = HOST_CA.is_file()
    if ca:
        shutil.copyfile(HOST_CA, staging / "host-ca-certificates.crt")
    path = staging / "Dockerfile"
    path.write_text(generated_dockerfile(base, tf_version, _requirements(), ca=ca))
    return BuildPlan(dockerfile=path, context=staging, generated=True, base=base, workdir=workdir)


def build_image(plan: BuildPlan, tag: str, *, engine: Engine | None = None, pull: str = "missing",
                log=print) -> tuple[Engine, float]:
    """Build ``plan`` as ``tag`` with the first builder that works; return it and the seconds taken.
    The builder's output goes to this process's stdout; a failure is one line (its last error)."""
    engine = engine or find_engine(BUILDERS, purpose="build images")
    args = ["build", "-t", tag, "-f", str(plan.dockerfile)]
    if engine.name != "docker":
        args.append(f"--pull={pull}")
    elif pull == "always":
        args.append("--pull")
    log(f"building {tag} with {engine.name} ({'generated Dockerfile, base ' + str(plan.base) if plan.generated else plan.dockerfile})")
    start = time.monotonic()
    proc = subprocess.run([*engine.cmd(*args), str(plan.context)], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    took = time.monotonic() - start
    if proc.returncode != 0:
        raise UserError(f"{engine.name} build of {tag} failed: {last_line(proc.stdout)} "
                        f"(run `{engine.name} {' '.join(args)} {plan.context}` to see the whole output)")
    return engine, took


def _gcp_token() -> str:
    """An access token from the user's Application Default Credentials (for Artifact Registry / gcr.io)."""
    try:
        import google.auth
        import google.auth.transport.requests
    except ImportError:
        raise UserError("pushing to Artifact Registry or gcr.io needs google-auth: pip install "
                        "'multiworker[vertex]' (or log in with `docker login` first)") from None
    try:
        creds, _ = google.auth.default(scopes=["https://www.googleapis.com/auth/cloud-platform"])
        creds.refresh(google.auth.transport.requests.Request())
    except Exception as exc:  # noqa: BLE001 - every auth failure becomes one line
        raise UserError(f"no Application Default Credentials to push with ({str(exc).splitlines()[0]}); run "
                        "`gcloud auth application-default login`") from None
    return str(creds.token)


def push_image(engine: Engine, tag: str) -> None:
    """Push ``tag`` with the credentials the engine already has (its auth file / ``docker login``), and
    for Artifact Registry / gcr.io, when the engine has none, the user's Application Default Credentials."""
    args = ["push", tag]
    if _GCP_REGISTRY.match(tag) and engine.name != "docker":
        registry = tag.split("/", 1)[0]
        if engine.call("login", "--get-login", registry, timeout=30).returncode != 0:
            args = ["push", "--creds", f"oauth2accesstoken:{_gcp_token()}", tag]
    proc = engine.call(*args, timeout=3600)
    if proc.returncode != 0:
        why = last_line(proc.stderr or proc.stdout)
        hint = ("log in first (`podman login REGISTRY` or `docker login REGISTRY`)"
                if re.search(r"auth|denied|401|403|credential", why, re.I) else "check the registry address")
        raise UserError(f"{engine.name} push {tag} failed: {why}; {hint}")


def staging_dir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="multiworker-build-")
