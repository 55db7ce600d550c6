"""What every writer works from: the validated spec being converted, its options, the notes gathered
on the way, and the helpers the writers share (env lists, durations, cloud paths, names)."""

from __future__ import annotations

import dataclasses
import re

from multiworker.errors import SpecError
from multiworker.spec.model import JobSpec, Program

__all__ = ["Target", "DEFAULT_MACHINE_TYPE", "DNS_1035", "MAX_LABEL", "env_list", "seconds", "cloud_path", "safe_name",
           "dns_1035_label", "check_hostnames"]

DNS_1035 = r"[a-z]([-a-z0-9]*[a-z0-9])?"  # RFC 1035: Kubernetes Job and Service names start with a letter
MAX_LABEL = 63

DEFAULT_MACHINE_TYPE = "n1-standard-4"


@dataclasses.dataclass
class Target:
    """One conversion: the validated spec, options, and the notes gathered on the way."""

    spec: JobSpec
    to: str
    source: str
    image: str | None = None
    allow_loss: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)
    #: role -> the Python package URIs its program runs from (a package job read from Vertex AI or
    #: AI Platform, written to either of them)
    packages: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def lose(self, field: str, message: str, *, instead: str = "drop it") -> None:
        """``field`` cannot be expressed in the target: an error, or a note with ``allow_loss``."""
        if self.allow_loss:
            self.notes.append(f"--allow-loss: {field}: {message}")
            return
        raise SpecError(f"{message} (or pass --allow-loss to {instead})", source=self.source, field=field)

    def explicit(self, field: str) -> bool:
        """Whether run_policy.``field`` was written in the spec (not a default)."""
        return field in self.spec.run_policy.model_fields_set

    def google_run_policy(self, platform: str, primary: str, *, restart_policies: tuple[str, ...]) -> None:
        """What Vertex AI and AI Platform cannot hold of run_policy: errors, or notes for defaults."""
        policy = self.spec.run_policy
        if policy.restart_policy not in restart_policies:
            # A note, not a loss: the platform's own retry rule applies, and a job that succeeds is the same.
            which = "" if self.explicit("restart_policy") else "the default "
            self.notes.append(f"run_policy.restart_policy is {which}{policy.restart_policy}; {platform} restarts "
                              "replicas only after system failures (like ExitCode: a kill or preemption), never "
                              "after an error in the program")
        if self.explicit("backoff_limit") and policy.backoff_limit != 3:
            self.lose("run_policy.backoff_limit", f"is {policy.backoff_limit}, a limit of local restarts; {platform} "
                      "has none (it retries system failures by its own rule)")
        if policy.success_policy != "chief":
            self.lose("run_policy.success_policy", f"on {platform} the {primary}'s exit decides the job")
        if self.explicit("grace_period"):
            self.lose("run_policy.grace_period", f"{platform} has no termination grace period setting")

    def program(self, role: str) -> Program:
        """The resolved program of a pool, with an image (the pool's, the job's, or --image)."""
        program = self.spec.resolved(role)
        if not program.image and not self.image:
            what = f"module {program.module}" if program.module else "a program"
            raise SpecError(
                f"pool {role} runs {what} but has no container image; pass --image IMAGE or set `image` in the spec",
                source=self.source,
                field="image",
            )
        return program if program.image else program.model_copy(update={"image": self.image})

    def command(self, program: Program) -> list[str] | None:
        """The container command: ``python -m MODULE``, the command, or None for the image's entry point."""
        if program.module:
            return ["python", "-m", program.module]
        return list(program.command) if program.command else None

    def roles(self, platform: str, primary: str = "chief") -> list[tuple[str, int, str]]:
        """(role, replicas, role whose program it runs) for a platform whose pool 0 is always a chief.

        A job of workers only (the tutorials' MultiWorkerMirroredStrategy jobs) becomes pool 0 with
        worker 0 plus a pool of the other workers, as the tutorials submit it: MultiWorkerMirroredStrategy
        treats the chief as one more worker, so training is the same.
        """
        counts = self.spec.replica_counts()
        if "chief" in counts:
            return [(r, n, r) for r, n in counts.items()]
        workers = counts.get("worker", 0)
        self.notes.append(
            f"pools.worker: worker 0 becomes {platform}'s {primary} (its first pool) and {workers - 1} worker(s) "
            "remain; TF_CONFIG then names it `chief` (the others worker 0..), which MultiWorkerMirroredStrategy "
            "treats as one of the workers, so training is the same"
        )
        out = [("chief", 1, "worker")]
        if workers > 1:
            out.append(("worker", workers - 1, "worker"))
        return out + [(r, n, r) for r, n in counts.items() if r not in ("chief", "worker")]

    def machine_keys(self, role: str, machine: dict | None, allowed: tuple[str, ...], platform: str) -> dict:
        """The machine settings the platform knows; the others are lost."""
        out = {}
        for key, value in (machine or {}).items():
            if key in allowed:
                out[key] = value
            else:
                self.lose(f"pools.{role}.machine.{key}", f"{platform} has no {key} setting")
        return out


def env_list(env: dict[str, str] | None) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in (env or {}).items()]


def seconds(value: float) -> int:
    return int(value) if float(value).is_integer() else int(value) + 1


def cloud_path(target: Target, field: str, value: str | None, platform: str, *, absolute_ok: bool = False) -> str | None:
    """A path the platform can write to: gs:// (or an absolute path in a pod); else lost."""
    if value is None:
        return None
    if value.startswith("gs://") or (absolute_ok and value.startswith("/")):
        return value
    where = "gs://BUCKET/PATH or an absolute path in the pod" if absolute_ok else "gs://BUCKET/PATH"
    target.lose(field, f"{value} is a local path; {platform} needs {where} (run locally with --map-path "
                       f"gs://BUCKET=./local-dir)")
    return None


def safe_name(name: str, pattern: str, fix, target: Target, platform: str) -> str:
    out = name if re.fullmatch(pattern, name) else fix(name)
    if out != name:
        target.notes.append(f"name {name!r} is {out!r} on {platform}")
    return out


def dns_1035_label(name: str) -> str:
    """``name`` made an RFC 1035 label: lower case, letters, digits and '-', a letter first, 63 at most."""
    out = re.sub(r"[^a-z0-9-]+", "-", name.lower()).strip("-")
    out = out if out[:1].isalpha() else f"job-{out}".rstrip("-")
    return out[:MAX_LABEL].rstrip("-")


def check_hostnames(t: Target, name: str, hosts: list[str], what: str) -> None:
    """SpecError when one of ``hosts`` (each made from ``name``) is longer than a DNS label may be."""
    for host in hosts:
        if len(host) > MAX_LABEL:
            room = MAX_LABEL - (len(host) - len(name))
            raise SpecError(
                f"{name!r} makes the {what} {host!r} {len(host)} characters; Kubernetes allows "
                f"{MAX_LABEL}: shorten the name to {room} characters or fewer",
                source=t.source, field="name",
            )
