"""A pasted gcloud training command -> the job it would submit, read as its Vertex AI or AI Platform config.

``gcloud ai custom-jobs create`` / ``local-run`` (``vertex.gcloud``) and ``gcloud ai-platform jobs submit
training`` (``aiplatform.gcloud``) become the document gcloud would send, flags overriding the ``--config``
file as in gcloud; that document then goes through the Vertex AI or AI Platform reader, so a command
and its config file mean the same job. Multiworker's own options may share the line.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from multiworker.errors import SpecError
from multiworker.spec.formats.aiplatform.gcloud import SUBMIT, submit
from multiworker.spec.formats.gcloud_args import GcloudJob, parse_line
from multiworker.spec.formats.load import load_parsed
from multiworker.spec.formats.options import LoadOptions
from multiworker.spec.formats.vertex.gcloud import CREATE, LOCAL_RUN, create, local_run
from multiworker.spec.load import LoadedSpec

__all__ = ["GcloudJob", "parse_command", "load_command", "COMMANDS", "looks_like_gcloud"]

COMMANDS = {
    ("ai", "custom-jobs", "create"): CREATE,
    ("ai", "custom-jobs", "local-run"): LOCAL_RUN,
    ("ai-platform", "jobs", "submit", "training"): SUBMIT,
    ("ml-engine", "jobs", "submit", "training"): SUBMIT,
}
_TRACKS = ("alpha", "beta")
# Flags that say how gcloud talks to the cloud, not what the job is.
_BOOKKEEPING = ("async", "stream-logs", "staging-bucket", "kms-keyring", "kms-location", "kms-project")


def looks_like_gcloud(words: list[str]) -> bool:
    """Whether ``words`` start a gcloud command line (``gcloud ai ...`` or ``ai ...``) rather than name a file."""
    head = words[1:] if words[:1] == ["gcloud"] else words
    head = head[1:] if head[:1] and head[0] in _TRACKS else head
    return bool(words[:1] == ["gcloud"] or any(tuple(head[:len(c)]) == c for c in COMMANDS))


def parse_command(argv: list[str], *, cwd: Path) -> GcloudJob:
    """Read a gcloud command line (with or without the leading ``gcloud``) into the job it would submit."""
    words = list(argv)
    if words[:1] == ["gcloud"]:
        words = words[1:]
    if words[:1] and words[0] in _TRACKS:
        words = words[1:]
    path = next((c for c in COMMANDS if tuple(words[:len(c)]) == c), None)
    if path is None:
        said = " ".join(w for w in words[:4] if not w.startswith("-")) or "(nothing)"
        names = [" ".join(c) for c in COMMANDS if c[0] != "ml-engine"]
        hint = difflib.get_close_matches(said, names, n=1, cutoff=0.5)
        fix = f"did you mean `gcloud {hint[0]}`?" if hint else "it runs " + ", ".join(f"`gcloud {n}`" for n in names)
        raise SpecError(f"`gcloud {said}` is not a training command multiworker runs; {fix}", source="gcloud")
    command = "gcloud " + " ".join(path)
    line = parse_line(words[len(path):], COMMANDS[path], command=command)
    reader = {"create": create, "local-run": local_run, "training": submit}[path[-1]]
    job = reader(line, cwd=cwd)
    ignored = line.ignored + [f"--{k}" for k in _BOOKKEEPING if k in line.values]
    if ignored:
        job.parsed.notes.append(f"gcloud flags that do not apply locally: {', '.join(ignored)}")
    return job


def load_command(argv: list[str], *, cwd: Path, check: bool = True) -> tuple[LoadedSpec, GcloudJob]:
    """A gcloud command line made runnable here (its --image/--map-path/--set options applied): (loaded, job)."""
    job = parse_command(argv, cwd=cwd)
    opts = job.local
    containers = bool(opts.get("containers"))  # the images run as they are
    options = LoadOptions(
        overrides=opts.get("set", ()),
        images=() if containers else opts.get("image", ()),
        dockerfile=str(cwd / opts["dockerfile"]) if opts.get("dockerfile") else None,
        map_paths=opts.get("map-path", ()),
        check=check and not containers,
        cwd=cwd,
        containers=containers,
    )
    loaded = load_parsed(job.parsed, options, source=job.source, path=job.config, base_dir=cwd)
    return loaded, job
