"""``gcloud ai-platform jobs submit training JOB`` (and ``ml-engine``) -> the AI Platform Job it submits.

As gcloud builds it (googlecloudsdk api_lib/ml_engine/jobs.BuildTrainingJob): the ``--config`` Job,
each flag then overriding its trainingInput field; the args after ``--`` become ``trainingInput.args``
and ``--package-path``/``--packages`` its packageUris (here the package's directory, used in place).
"""

from __future__ import annotations

import copy
from pathlib import Path

from multiworker.errors import SpecError
from multiworker.spec.formats.aiplatform import reader as aiplatform
from multiworker.spec.formats.gcloud_args import Flag, GcloudJob, Line, enum_name
from multiworker.spec.load import read_yaml

__all__ = ["SUBMIT", "submit"]

_V, _B, _L = Flag(), Flag("bool"), Flag("list")
_ACCELERATOR = Flag("dict", {"type": "value", "count": "int"}, ("type", "count"))
SUBMIT = {
    "config": _V, "job-dir": _V, "labels": Flag("dict"), "module-name": _V, "package-path": _V, "packages": _L,
    "python-version": _V, "region": _V, "runtime-version": _V, "scale-tier": _V, "service-account": _V,
    "staging-bucket": _V, "enable-web-access": _B, "async": _B, "stream-logs": _B, "network": _V,
    "master-machine-type": _V, "master-image-uri": _V, "master-accelerator": _ACCELERATOR,
    "worker-machine-type": _V, "worker-count": Flag("int"), "worker-image-uri": _V, "worker-accelerator": _ACCELERATOR,
    "parameter-server-machine-type": _V, "parameter-server-count": Flag("int"), "parameter-server-image-uri": _V,
    "parameter-server-accelerator": _ACCELERATOR, "use-chief-in-tf-config": Flag("optbool"), "tpu-tf-version": _V,
    **{name: _V for name in ("kms-key", "kms-keyring", "kms-location", "kms-project")},
}


_TRAINING_FIELDS = (
    ("module-name", "pythonModule"), ("job-dir", "jobDir"), ("region", "region"), ("runtime-version", "runtimeVersion"),
    ("python-version", "pythonVersion"), ("network", "network"), ("service-account", "serviceAccount"),
    ("enable-web-access", "enableWebAccess"), ("master-machine-type", "masterType"),
    ("use-chief-in-tf-config", "useChiefInTfConfig"),
)
_TIERS = (("master", "master"), ("worker", "worker"), ("parameter-server", "parameterServer"))


def submit(line: Line, *, cwd: Path) -> GcloudJob:
    v, command = line.values, line.command
    if len(line.positionals) != 1:
        what = "is missing" if not line.positionals else f"is one word; got {' '.join(line.positionals)!r}"
        raise SpecError(f"{what}: `{command} JOB [flags] [-- ARGS]`", source=command, field="JOB")
    config = cwd / v["config"] if v.get("config") else None
    data = read_yaml(config) if config else None
    if data is not None and not isinstance(data, dict):
        raise SpecError("must be a mapping: a Job with trainingInput", source=str(config))
    job = copy.deepcopy(data or {})
    key = next((k for k in ("trainingInput", "training_input") if k in job), None)
    if key:
        ti = job.pop(key) or {}
    elif {"jobId", "job_id", "labels"} & set(job):
        ti = {}
    else:  # a bare trainingInput, which the AI Platform reader also takes
        ti, job = job, {}
    ti = dict(ti)
    for flag, field in _TRAINING_FIELDS:
        if v.get(flag) is not None:
            ti[field] = v[flag]
    if v.get("scale-tier"):
        ti["scaleTier"] = enum_name(v["scale-tier"])
    packages = [p if p.startswith("gs://") else str((cwd / p).resolve()) for p in v.get("packages", [])]
    if v.get("package-path"):
        packages.insert(0, str((cwd / v["package-path"]).resolve().parent))
    if packages:
        ti["packageUris"] = packages
    for flag, stem in _TIERS:
        _tier_flags(ti, v, flag, stem, command)
    if v.get("tpu-tf-version"):
        ti.setdefault("workerConfig", {})["tpuTfVersion"] = v["tpu-tf-version"]
    if v.get("kms-key"):
        ti["encryptionConfig"] = {"kmsKeyName": v["kms-key"]}
    if line.user_args is not None:
        ti["args"] = list(line.user_args)
    if v.get("labels"):
        job["labels"] = v["labels"]
    job["jobId"] = line.positionals[0]
    job["trainingInput"] = ti
    source = str(config) if config else command
    parsed = aiplatform.parse(job, source=source, path=config)
    return GcloudJob(command=command, parsed=parsed, source=source, config=config, local=line.local)


def _tier_flags(ti: dict, v: dict, flag: str, stem: str, command: str) -> None:
    """--STEM-machine-type/--STEM-count (a pair in gcloud), --STEM-image-uri, --STEM-accelerator."""
    if flag != "master":
        given = [f"--{flag}-{x}" for x in ("machine-type", "count") if v.get(f"{flag}-{x}") is not None]
        if len(given) == 1:
            other = "--{}-{}".format(flag, "count" if given[0].endswith("machine-type") else "machine-type")
            raise SpecError(f"gcloud takes it only together with {other}", source=command, field=given[0])
        if given:
            if v[f"{flag}-count"] < 1:
                raise SpecError("must be 1 or more", source=command, field=f"--{flag}-count")
            ti[f"{stem}Type"], ti[f"{stem}Count"] = v[f"{flag}-machine-type"], v[f"{flag}-count"]
    config = dict(ti.get(f"{stem}Config") or {})
    if v.get(f"{flag}-image-uri"):
        config["imageUri"] = v[f"{flag}-image-uri"]
    accelerator = v.get(f"{flag}-accelerator")
    if accelerator:
        if accelerator["count"] < 1:
            raise SpecError("count must be 1 or more", source=command, field=f"--{flag}-accelerator")
        config["acceleratorConfig"] = {"type": enum_name(accelerator["type"]), "count": accelerator["count"]}
    if config:
        ti[f"{stem}Config"] = config
