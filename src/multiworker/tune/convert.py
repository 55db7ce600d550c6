"""Write a tuning config in either cloud form: AI Platform (``trainingInput.hyperparameters``, with
the job's trainingInput when there is a job) or a Vertex AI HyperparameterTuningJob (``studySpec``,
counts, and ``trialJobSpec`` when there is a job). The job goes through ``multiworker convert``'s writers."""

from __future__ import annotations

from pathlib import Path

from multiworker.errors import SpecError
from multiworker.tune import aiplatform, vertex
from multiworker.tune.config import JobRef, TuningConfig

__all__ = ["convert_config", "TARGETS"]

TARGETS = ("vertex", "aiplatform")


def convert_config(cfg: TuningConfig, to: str, *, job: JobRef | None = None, name: str | None = None,
                   image: str | None = None, allow_loss: bool = False) -> tuple[dict, list[str]]:
    """The tuning document in form ``to`` and notes; ``job`` (or the config's own) becomes its trial job."""
    if to not in TARGETS:
        raise SpecError(f"{to!r} is not a tuning config form; use one of {', '.join(TARGETS)}", source="--to")
    notes: list[str] = list(cfg.notes)

    def lose(field: str, message: str) -> None:
        if not allow_loss:
            raise SpecError(f"{message} (or pass --allow-loss to drop it)", source=cfg.source, field=field)
        notes.append(f"--allow-loss: {field}: {message}")

    job = job or cfg.job
    job_doc = _job_doc(job, to, image=image, allow_loss=allow_loss, notes=notes) if job is not None else None
    if to == "aiplatform":
        hp = aiplatform.write(cfg.study, lose=lose)
        if job_doc is None:
            return {"trainingInput": {"hyperparameters": hp}}, notes
        job_doc["trainingInput"]["hyperparameters"] = hp
        if name:
            job_doc["jobId"] = name
        return job_doc, notes
    doc = {"displayName": name or cfg.name or (job_doc or {}).get("displayName") or Path(cfg.source).stem,
           **vertex.write(cfg.study)}
    if job_doc is not None:
        doc["trialJobSpec"] = job_doc["jobSpec"]
    return doc, notes


def _job_doc(job: JobRef, to: str, *, image: str | None, allow_loss: bool, notes: list[str]) -> dict:
    from multiworker.spec.formats import parse_job
    from multiworker.spec.formats.convert import convert

    parsed = parse_job(job.path, format=job.format, data=job.data)
    # The job's own hyperparameters are the study being converted, not a setting lost on the way.
    parsed.dropped = [(k, f) for k, f in parsed.dropped if not f.endswith("hyperparameters")]
    parsed.notes = [n for n in parsed.notes if "hyperparameters" not in n]
    doc, job_notes = convert(parsed, to, source=str(job.path), image=image, allow_loss=allow_loss)
    notes.extend(job_notes)
    return doc
