"""Read a tuning file in either cloud form: AI Platform's ``trainingInput.hyperparameters`` (the
`gcloud ai-platform jobs submit training --config` file) or Vertex AI's HyperparameterTuningJob
(`gcloud ai hp-tuning-jobs create --config`). Either may also carry the trial job."""

from __future__ import annotations

import dataclasses
import difflib
from pathlib import Path
from typing import Any

from multiworker.errors import SpecError
from multiworker.spec.formats.common import job_name
from multiworker.spec.load import read_yaml
from multiworker.tune import aiplatform, vertex
from multiworker.tune.model import Study

__all__ = ["TuningConfig", "JobRef", "read_config", "parse_config"]

_MARKERS = ("trainingInput", "hyperparameters", "studySpec", "study_spec", "training_input")


@dataclasses.dataclass(frozen=True)
class JobRef:
    """Where a trial's job comes from: a file, its format, and the job already read (or None: read the file)."""

    path: Path
    format: str | None = None
    data: Any = None


@dataclasses.dataclass
class TuningConfig:
    """A tuning file read: the study, its form, a name for it, and the trial job when the file has one."""

    study: Study
    source: str
    form: str  # "aiplatform" or "vertex"
    name: str | None = None
    job: JobRef | None = None
    notes: list[str] = dataclasses.field(default_factory=list)


def read_config(path: str | Path) -> TuningConfig:
    """Read and check a tuning file; every problem is a one-line SpecError naming the field."""
    path = Path(path)
    return parse_config(read_yaml(path), path=path)


def parse_config(data: Any, *, path: Path) -> TuningConfig:
    source = str(path)
    if not isinstance(data, dict):
        raise SpecError("a tuning config is a mapping with trainingInput.hyperparameters (AI Platform) or "
                        "studySpec (Vertex AI)", source=source)
    notes: list[str] = []
    if "studySpec" in data or "study_spec" in data:
        study, job = vertex.read(data, source=source, notes=notes)
        ref = None
        if job.trial_job_spec is not None:
            ref = JobRef(path=path, format="vertex", data=job.trial_job_spec)
        name = job_name(job.display_name, None) if job.display_name else None
        return TuningConfig(study, source, "vertex", name, ref, notes)
    for key in ("trainingInput", "training_input"):
        if key in data:
            ti = data[key]
            if not isinstance(ti, dict) or "hyperparameters" not in ti:
                raise SpecError("has no hyperparameters; add hyperparameters: {goal, hyperparameterMetricTag, "
                                "maxTrials, params: [...]}", source=source, field=key)
            study = aiplatform.read(ti["hyperparameters"], source=source, prefix=f"{key}.hyperparameters", notes=notes)
            ref = JobRef(path=path, format="aiplatform") if aiplatform.has_program(ti) else None
            name = job_name(data["jobId"], None) if isinstance(data.get("jobId"), str) else None
            return TuningConfig(study, source, "aiplatform", name, ref, notes)
    if "hyperparameters" in data:
        study = aiplatform.read(data["hyperparameters"], source=source, prefix="hyperparameters", notes=notes)
        return TuningConfig(study, source, "aiplatform", None, None, notes)
    for key in map(str, data):
        hint = difflib.get_close_matches(key, _MARKERS, n=1, cutoff=0.7)
        if hint:
            raise SpecError(f"unknown key `{key}`; did you mean `{hint[0]}`?", source=source, field=key)
    raise SpecError("not a tuning config: expected trainingInput.hyperparameters (AI Platform) or studySpec "
                    "(Vertex AI HyperparameterTuningJob)", source=source)
