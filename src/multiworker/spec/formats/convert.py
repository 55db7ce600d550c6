"""Write a job in another format. What the target cannot express is an error naming the field
(``allow_loss`` turns those errors into notes); bookkeeping settings that do not carry over are noted."""

from __future__ import annotations

from collections.abc import Callable

from multiworker.spec.formats import aiplatform, jobset, pytorchjob, tfjob, vertex
from multiworker.spec.formats.common import KINDS, LOSSY_KINDS, Parsed
from multiworker.spec.formats.detect import FORMATS
from multiworker.spec.formats.frameworks import check_framework
from multiworker.spec.formats.parse import parse_job
from multiworker.spec.formats.schema import check_schema
from multiworker.spec.formats.target import DEFAULT_MACHINE_TYPE, Target
from multiworker.spec.load import spec_from_dict
from multiworker.spec.model import ROLES, JobSpec

__all__ = ["Target", "convert", "WRITERS", "DEFAULT_MACHINE_TYPE"]

# Target format -> its writer (native is written by ``convert`` itself).
WRITERS: dict[str, Callable[[Target], dict]] = {
    "vertex": vertex.write, "aiplatform": aiplatform.write, "tfjob": tfjob.write, "jobset": jobset.write,
    "pytorchjob": pytorchjob.write,
}
# Settings that only say how to run here (interpreter, directories, threads, Ray placement): noted, never an error.
_LOCAL_ONLY = ("working_dir", "python", "threads_per_replica", "placement")
_LOCAL_ONLY_POLICY = ("backoff", "evaluator_timeout", "hang_timeout")
_PACKAGE_TARGETS = ("vertex", "aiplatform")


def convert(parsed: Parsed, to: str, *, source: str, image: str | None = None,
            allow_loss: bool = False) -> tuple[dict, list[str]]:
    """``parsed`` (any format, overrides applied) as a ``to`` document, plus notes for the user."""
    spec = spec_from_dict(parsed.native, source=source)
    target = Target(spec=spec, to=to, source=source, image=image, allow_loss=allow_loss)
    _carry_over(target, parsed)
    if to == "native":
        return _native(parsed.native, spec), target.notes
    _local_only(target)
    check_framework(target)
    doc = WRITERS[to](target)
    if to in FORMATS:  # a format we also read (PyTorchJob is written only)
        check_schema(doc, to, source=source)
        parse_job(source, format=to, data=doc)  # what we write, we can read back
    return doc, target.notes


def _carry_over(target: Target, parsed: Parsed) -> None:
    """What the source held that the native spec cannot: errors for what the program sees, notes else."""
    for role, packages in parsed.packages.items():
        if target.to in _PACKAGE_TARGETS:  # both clouds run a module from packageUris
            target.packages[role] = [uri for uri, _ in packages]
            continue
        target.lose(packages[0][1], f"{target.to} cannot run Python packages (packageUris), only Vertex AI and AI "
                    "Platform can; build a container image with the package instead")
    for field, message in parsed.conflicts:
        target.lose(field, message)
    for kind, field in parsed.dropped:
        if kind == "runtime" and target.packages:  # the package job's runtime: the target's own rule applies
            target.notes.append(f"{field}: a Python package runs on "
                                + ("the executor image (--image or the pools' image)" if target.to == "vertex"
                                   else "the runtime version written below"))
            continue
        if kind in LOSSY_KINDS:
            target.lose(field, f"{KINDS[kind]} have no equivalent in the native spec")
    noted = [(k, f) for k, f in parsed.dropped if k not in LOSSY_KINDS]
    for kind in KINDS:
        fields = list(dict.fromkeys(f for k, f in noted if k == kind))
        if fields:
            target.notes.append(f"not carried over ({KINDS[kind]}): {', '.join(fields)}")


def _local_only(target: Target) -> None:
    spec = target.spec
    fields = [f for f in _LOCAL_ONLY if getattr(spec, f) is not None]
    fields += [f"pools.{r}.{f}" for r, p in spec.pools.items() for f in _LOCAL_ONLY if getattr(p, f, None) is not None]
    fields += [f"run_policy.{f}" for f in _LOCAL_ONLY_POLICY if target.explicit(f)]
    if fields:
        target.notes.append(f"local settings left out ({', '.join(fields)}): they only say how to run here")


def _native(native: dict, spec: JobSpec) -> dict:
    order = ("name", "framework", "image", "module", "command", "working_dir", "python", "args", "env", "chief_task_type",
             "output_dir", "threads_per_replica", "pools", "run_policy")
    out = {k: native[k] for k in order if native.get(k) is not None}
    out.update({k: v for k, v in native.items() if k not in out and v is not None})
    out["pools"] = {r: native["pools"][r] for r in ROLES if r in native.get("pools", {})}
    return out
