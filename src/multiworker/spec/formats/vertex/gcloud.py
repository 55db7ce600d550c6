"""``gcloud ai custom-jobs create`` and ``local-run`` -> the Vertex AI CustomJobSpec they submit or run.

As gcloud builds it (googlecloudsdk command_lib/ai/custom_jobs): the ``--config`` CustomJobSpec, whose
workerPoolSpecs the ``--worker-pool-spec`` flags replace when given; then ``--args`` go to every pool,
``--command`` to container pools, ``--python-package-uris`` to the flags' Python package pools. A
``local-package-path`` in the first spec is gcloud's autopackaging: the image it builds runs
``python -m MODULE`` (``python SCRIPT.py``, ``/bin/bash SCRIPT``) from that directory in every pool;
here that program runs from that directory. ``local-run`` is one replica of the same.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from multiworker.errors import SpecError
from multiworker.spec.formats.common import Parsed, job_name
from multiworker.spec.formats.gcloud_args import Flag, GcloudJob, Line, enum_name
from multiworker.spec.formats.vertex import reader as vertex
from multiworker.spec.load import read_yaml

__all__ = ["CREATE", "LOCAL_RUN", "create", "local_run"]

_V, _B, _L = Flag(), Flag("bool"), Flag("list")
_KMS = {name: _V for name in ("kms-key", "kms-keyring", "kms-location", "kms-project")}
_POOL_KEYS = {
    "machine-type": "value", "replica-count": "int", "accelerator-type": "value", "accelerator-count": "int",
    "container-image-uri": "value", "executor-image-uri": "value", "output-image-uri": "value",
    "python-module": "value", "script": "value", "local-package-path": "value", "requirements": "list",
    "extra-dirs": "list", "extra-packages": "list",
}
CREATE = {
    "config": _V, "display-name": _V, "region": _V, "worker-pool-spec": Flag("dicts", _POOL_KEYS),
    "args": _L, "command": _L, "python-package-uris": _L, "network": _V, "service-account": _V,
    "enable-web-access": _B, "enable-dashboard-access": _B, "labels": Flag("dict"), "persistent-resource-id": _V,
    **_KMS,
}
LOCAL_RUN = {
    "executor-image-uri": _V, "python-module": _V, "script": _V, "local-package-path": _V, "requirements": _L,
    "extra-dirs": _L, "extra-packages": _L, "output-image-uri": _V, "gpu": _B, "docker-run-options": _L,
    "service-account-key-file": _V,
}
_BUILT = "(image gcloud builds from local-package-path)"


# -- create -----------------------------------------------------------------------------

def create(line: Line, *, cwd: Path) -> GcloudJob:
    v, command = line.values, line.command
    if line.positionals:
        raise SpecError(f"unexpected argument {line.positionals[0]!r}", source=command)
    if line.user_args is not None:
        raise SpecError("takes no arguments after `--`; pass the program's arguments with --args=A,B (as gcloud "
                        "does)", source=command, field="--")
    config, spec, name = _config(v, cwd, command)
    if config is None and not v.get("worker-pool-spec"):
        raise SpecError("give --config FILE or at least one --worker-pool-spec (gcloud needs one of them)",
                        source=command, field="--worker-pool-spec")
    autopackage = None
    if v.get("worker-pool-spec"):
        pools, autopackage = _flag_pools(v["worker-pool-spec"], v.get("python-package-uris"), cwd, command)
        spec.pop("worker_pool_specs", None)
        spec["workerPoolSpecs"] = pools
    elif v.get("python-package-uris"):
        raise SpecError("applies to --worker-pool-spec pools only; set packageUris in the --config file",
                        source=command, field="--python-package-uris")
    _apply_software(spec, v.get("args"), v.get("command"))
    for flag, key, value in (("network", "network", None), ("service-account", "serviceAccount", None),
                             ("enable-web-access", "enableWebAccess", None),
                             ("enable-dashboard-access", "enableDashboardAccess", None),
                             ("persistent-resource-id", "persistentResourceId", None)):
        if v.get(flag):
            spec[key] = v[flag] if value is None else value
    source = str(config) if config else command
    try:
        parsed = vertex.parse(spec, source=source, path=config)
    except SpecError as exc:
        if v.get("worker-pool-spec") and exc.field and exc.field.startswith("workerPoolSpecs["):
            index = int(exc.field[len("workerPoolSpecs["):].split("]")[0])
            raise SpecError(exc.message, source=command, field=f"--worker-pool-spec (#{index + 1})") from None
        raise
    parsed.native["name"] = job_name(v.get("display-name") or name, config)
    if v.get("worker-pool-spec"):
        parsed.packages = {role: [(uri, "--python-package-uris") for uri, _ in uris]
                           for role, uris in parsed.packages.items()}
    if v.get("labels"):
        parsed.drop("tracking", "--labels")
    if v.get("kms-key"):
        parsed.drop("network", "--kms-key")
    if v.get("region"):
        parsed.drop("scheduling", "--region")
    if autopackage:
        _local_package(parsed, **autopackage)
    return GcloudJob(command=command, parsed=parsed, source=source, config=config, local=line.local)


def _config(v: dict, cwd: Path, command: str) -> tuple[Path | None, dict, str | None]:
    """The --config CustomJobSpec (a whole CustomJob is read too), or an empty one."""
    if not v.get("config"):
        return None, {}, None
    config = cwd / v["config"]
    data = read_yaml(config)
    if data is None:
        return config, {}, None
    if not isinstance(data, dict):
        raise SpecError("must be a mapping: a CustomJobSpec with workerPoolSpecs", source=str(config))
    for key in ("jobSpec", "job_spec"):
        if isinstance(data.get(key), dict):
            return config, copy.deepcopy(data[key]), data.get("displayName") or data.get("display_name")
    return config, copy.deepcopy(data), None


def _flag_pools(specs: list[dict], uris: list[str] | None, cwd: Path, command: str) -> tuple[list[dict], dict | None]:
    """The --worker-pool-spec flags as WorkerPoolSpecs, checked as gcloud checks them."""
    field = "--worker-pool-spec"
    if not specs[0]:
        raise SpecError("the first --worker-pool-spec is empty; pool 0 is the chief", source=command, field=field)
    local = "local-package-path" in specs[0]
    for i, spec in enumerate(specs):
        if not spec:
            continue
        where = f"{field} (#{i + 1})"
        if "machine-type" not in spec:
            raise SpecError("key `machine-type` is required (e.g. machine-type=n1-standard-4)", source=command,
                            field=where)
        if "accelerator-count" in spec and "accelerator-type" not in spec:
            raise SpecError("key `accelerator-type` is required with `accelerator-count`", source=command, field=where)
        software = set(spec) - {"machine-type", "replica-count", "accelerator-type", "accelerator-count"}
        if i and "local-package-path" in spec:
            raise SpecError("key `local-package-path` is only allowed in the first --worker-pool-spec",
                            source=command, field=where)
        if i and local and software:
            raise SpecError(f"keys {', '.join(sorted(software))} are not allowed: the first --worker-pool-spec "
                            "has a local-package-path, whose image every pool runs", source=command, field=where)
        if not local:
            _check_software(spec, uris, command, where)
    if local and uris:
        raise SpecError("is not allowed with local-package-path (gcloud builds the image from that directory)",
                        source=command, field="--python-package-uris")
    autopackage = _autopackage(specs[0], cwd, command) if local else None
    pools: list[dict[str, Any]] = []
    for spec in specs:
        if not spec:
            pools.append({})
            continue
        machine: dict[str, Any] = {"machineType": spec["machine-type"]}
        if spec.get("accelerator-type"):
            machine["acceleratorType"] = enum_name(spec["accelerator-type"])
            machine["acceleratorCount"] = spec.get("accelerator-count", 1)
        pool: dict[str, Any] = {"machineSpec": machine, "replicaCount": spec.get("replica-count", 1)}
        if autopackage:
            pool["containerSpec"] = {"imageUri": autopackage["image"], "command": autopackage["entry"]}
        elif "container-image-uri" in spec:
            pool["containerSpec"] = {"imageUri": spec["container-image-uri"]}
        else:
            pool["pythonPackageSpec"] = {"executorImageUri": spec["executor-image-uri"], "packageUris": list(uris or []),
                                         "pythonModule": spec["python-module"]}
        pools.append(pool)
    return pools, autopackage and {k: autopackage[k] for k in ("workdir", "known", "build")}


def _check_software(spec: dict, uris: list[str] | None, command: str, where: str) -> None:
    if ("executor-image-uri" in spec) + ("container-image-uri" in spec) != 1:
        raise SpecError("exactly one of keys executor-image-uri, container-image-uri is required", source=command,
                        field=where)
    if "container-image-uri" in spec and "python-module" in spec:
        raise SpecError("key `python-module` is not allowed with `container-image-uri`", source=command, field=where)
    if "executor-image-uri" in spec and "python-module" not in spec:
        raise SpecError("key `python-module` is required with `executor-image-uri`", source=command, field=where)
    build_only = sorted({"script", "requirements", "extra-packages", "extra-dirs", "output-image-uri"} & set(spec))
    if build_only:
        raise SpecError(f"keys {', '.join(build_only)} are only allowed with local-package-path in the first "
                        "--worker-pool-spec", source=command, field=where)
    if "executor-image-uri" in spec and not uris:
        raise SpecError("is required with executor-image-uri and python-module: the trainer packages to run, e.g. "
                        "--python-package-uris=gs://BUCKET/trainer-0.1.tar.gz", source=command,
                        field="--python-package-uris")


def _autopackage(spec: dict, cwd: Path, command: str, field: str = "--worker-pool-spec (#1)") -> dict:
    """gcloud's autopackaging: an image from local-package-path whose entry point runs the module or script."""
    workdir = (cwd / Path(spec.get("local-package-path") or ".").expanduser()).resolve()
    if not workdir.is_dir():
        raise SpecError(f"directory {workdir} is not found", source=command, field=field)
    if "executor-image-uri" not in spec:
        raise SpecError("key `executor-image-uri` is required with local-package-path", source=command, field=field)
    if ("python-module" in spec) + ("script" in spec) != 1:
        raise SpecError("exactly one of python-module, script is required with local-package-path", source=command,
                        field=field)
    if spec.get("python-module"):
        entry = ["python", "-m", spec["python-module"]]
    else:
        script = spec["script"]
        if not (workdir / script).is_file():
            raise SpecError(f"file {script!r} is not found under {workdir}", source=command, field=field)
        entry = ["python", script] if script.endswith(".py") else ["/bin/bash", script]
    build = {k: spec[k] for k in ("requirements", "extra-packages", "extra-dirs") if spec.get(k)}
    image = spec.get("output-image-uri")
    return {"workdir": workdir, "entry": entry, "image": image or _BUILT, "known": bool(image), "build": build}


def _local_package(parsed: Parsed, *, workdir: Path, known: bool, build: dict) -> None:
    """Run the autopackaged program from its directory; without an output image, no image is known."""
    native = parsed.native
    native["working_dir"] = str(workdir)
    if not known:
        for node in [native, *native.get("pools", {}).values()]:
            if node.get("image") == _BUILT:
                del node["image"]
    if build:
        what = "; ".join(f"{k} {', '.join(v)}" for k, v in build.items())
        parsed.notes.append(f"{what}: gcloud puts them in the image it builds; locally the launcher's Python must "
                            "already have them")


def _apply_software(spec: dict, args: list[str] | None, command: list[str] | None) -> None:
    """--args to every pool, --command to container pools, after the config (gcloud's order)."""
    pools = spec.get("workerPoolSpecs", spec.get("worker_pool_specs"))
    if isinstance(pools, dict):
        pools = [pools]
    for pool in pools if isinstance(pools, list) else []:
        if not isinstance(pool, dict):
            continue
        container = pool.get("containerSpec", pool.get("container_spec"))
        package = pool.get("pythonPackageSpec", pool.get("python_package_spec"))
        if args:
            for target in (container, package):
                if isinstance(target, dict):
                    target["args"] = list(args)
        if command and isinstance(container, dict):
            container["command"] = list(command)
    if pools is not None:
        spec.pop("worker_pool_specs", None)
        spec["workerPoolSpecs"] = pools


# -- local-run ------------------------------------------------------------------------

def local_run(line: Line, *, cwd: Path) -> GcloudJob:
    v, command = line.values, line.command
    if not v.get("executor-image-uri"):
        raise SpecError("is required: the image that runs the program", source=command, field="--executor-image-uri")
    if v.get("python-module") and v.get("script"):
        raise SpecError("--python-module and --script exclude each other; keep one", source=command, field="--script")
    args = list(line.user_args if line.user_args is not None else line.positionals)
    spec = {k: v[k] for k in ("executor-image-uri", "python-module", "script", "local-package-path",
                              "requirements", "extra-dirs", "extra-packages", "output-image-uri") if v.get(k)}
    if spec.get("python-module") or spec.get("script"):
        field = "--script" if spec.get("script") else "--local-package-path"
        auto = _autopackage(spec, cwd, command, field=field)
        pool = {"containerSpec": {"imageUri": auto["image"], "command": auto["entry"], "args": args}}
    else:
        built = sorted(k for k in ("requirements", "extra-dirs", "extra-packages", "output-image-uri") if v.get(k))
        if built:
            raise SpecError(f"--{', --'.join(built)} build an image and need --python-module or --script; or drop "
                            "them to run the executor image's entry point", source=command, field="--python-module")
        auto = None
        pool = {"containerSpec": {"imageUri": v["executor-image-uri"], "args": args}}
    parsed = vertex.parse({"workerPoolSpecs": [pool]}, source=command)
    parsed.native["name"] = job_name(v.get("python-module") or Path(v.get("script") or "local-run").stem, None)
    for flag, kind in (("gpu", "machine"), ("docker-run-options", "container"), ("service-account-key-file", "network")):
        if v.get(flag):
            parsed.drop(kind, f"--{flag}")
    if auto:
        _local_package(parsed, workdir=auto["workdir"], known=auto["known"], build=auto["build"])
    return GcloudJob(command=command, parsed=parsed, source=command, config=None, local=line.local)


