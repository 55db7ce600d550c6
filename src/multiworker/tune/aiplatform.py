"""AI Platform Training's ``trainingInput.hyperparameters`` (HyperparameterSpec), read and written.

Field names as in the ml v1 REST reference (GoogleCloudMlV1HyperparameterSpec and
GoogleCloudMlV1ParameterSpec): goal, hyperparameterMetricTag, maxTrials, maxParallelTrials,
maxFailedTrials, enableTrialEarlyStopping, algorithm, resumePreviousJobId, params[].
"""

from __future__ import annotations

from typing import Any

from multiworker.errors import SpecError
from multiworker.spec.formats.common import CamelModel, Str, validate
from multiworker.tune.model import (
    ALGORITHMS,
    DEFAULT_METRIC_TAG,
    GOALS,
    SCALES,
    TYPES,
    Study,
    check_study,
    choose,
    make_param,
    plain_number,
)

__all__ = ["read", "write", "has_program"]

# AI Platform's default algorithm is Bayesian optimization; the name is accepted for it.
_ALGORITHM_ALIASES = {"BAYESIAN_OPTIMIZATION": "ALGORITHM_UNSPECIFIED"}
_PROGRAM_KEYS = ("pythonModule", "python_module", "masterConfig", "master_config", "packageUris", "package_uris")


class ParameterSpec(CamelModel):
    parameter_name: str
    type: str
    min_value: float | None = None
    max_value: float | None = None
    categorical_values: list[Str] | None = None
    discrete_values: list[float] | None = None
    scale_type: str | None = None


class HyperparameterSpec(CamelModel):
    goal: str | None = None
    hyperparameter_metric_tag: str | None = None
    max_trials: int | None = None
    max_parallel_trials: int | None = None
    max_failed_trials: int | None = None
    enable_trial_early_stopping: bool | None = None
    algorithm: str | None = None
    resume_previous_job_id: str | None = None
    params: list[ParameterSpec]


def has_program(training_input: dict) -> bool:
    """Whether a trainingInput also describes the job (a module or a container), not only the tuning."""
    return any(k in training_input for k in _PROGRAM_KEYS)


def read(spec: Any, *, source: str, prefix: str, notes: list[str]) -> Study:
    """A HyperparameterSpec mapping (found at ``prefix`` in the file) into a :class:`Study`."""
    hp = validate(HyperparameterSpec, spec, source=source, prefix=prefix)
    at = f"{prefix}."
    params = []
    for i, p in enumerate(hp.params):
        where = f"{at}params[{i}]"
        ptype = choose(p.type, TYPES, source=source, field=f"{where}.type")
        values = p.categorical_values if ptype == "CATEGORICAL" else p.discrete_values
        other = p.discrete_values if ptype == "CATEGORICAL" else p.categorical_values
        if other is not None:
            wrong = "discreteValues" if ptype == "CATEGORICAL" else "categoricalValues"
            raise SpecError(f"does not apply to a {ptype} parameter; remove it", source=source, field=f"{where}.{wrong}")
        scale = None if p.scale_type in (None, "NONE") else choose(p.scale_type, SCALES, source=source,
                                                                      field=f"{where}.scaleType")
        params.append(make_param(
            name=p.parameter_name, type=ptype, min_value=p.min_value, max_value=p.max_value, values=values,
            scale=scale, source=source,
            fields={"name": f"{where}.parameterName", "type": f"{where}.type", "min": f"{where}.minValue",
                    "max": f"{where}.maxValue", "scale": f"{where}.scaleType",
                    "values": f"{where}.{'categoricalValues' if ptype == 'CATEGORICAL' else 'discreteValues'}"},
        ))
    if hp.resume_previous_job_id:
        notes.append(f"{at}resumePreviousJobId: a local study resumes by name; run again with --resume")
    study = Study(
        metric=hp.hyperparameter_metric_tag or DEFAULT_METRIC_TAG,
        goal=choose(hp.goal, GOALS, source=source, field=f"{at}goal") or "MAXIMIZE",
        params=tuple(params),
        max_trials=1 if hp.max_trials is None else hp.max_trials,
        parallel_trials=1 if hp.max_parallel_trials is None else hp.max_parallel_trials,
        max_failed_trials=hp.max_failed_trials or 0,
        algorithm=choose(hp.algorithm, ALGORITHMS, source=source, field=f"{at}algorithm",
                         aliases=_ALGORITHM_ALIASES) or "ALGORITHM_UNSPECIFIED",
        early_stopping=bool(hp.enable_trial_early_stopping),
    )
    fields = {"params": f"{at}params", "max_trials": f"{at}maxTrials", "parallel_trials": f"{at}maxParallelTrials",
              "max_failed_trials": f"{at}maxFailedTrials", "algorithm": f"{at}algorithm",
              "metric": f"{at}hyperparameterMetricTag"}
    return check_study(study, source=source, fields=fields)


def write(study: Study, *, lose) -> dict:
    """The HyperparameterSpec for ``study``; ``lose(field, message)`` for what it cannot hold."""
    if study.measurement != "LAST_MEASUREMENT":
        lose("measurementSelectionType", f"is {study.measurement}; AI Platform has no choice of measurement")
    out: dict[str, Any] = {
        "goal": study.goal,
        "hyperparameterMetricTag": study.metric,
        "maxTrials": study.max_trials,
        "maxParallelTrials": study.parallel_trials,
    }
    if study.max_failed_trials:
        out["maxFailedTrials"] = study.max_failed_trials
    if study.early_stopping:
        out["enableTrialEarlyStopping"] = True
    if study.algorithm != "ALGORITHM_UNSPECIFIED":
        out["algorithm"] = study.algorithm
    params = []
    for p in study.params:
        item: dict[str, Any] = {"parameterName": p.name, "type": p.type}
        if p.type in ("DOUBLE", "INTEGER"):
            cast = int if p.type == "INTEGER" else float
            item["minValue"], item["maxValue"] = cast(p.min_value), cast(p.max_value)
        elif p.type == "CATEGORICAL":
            item["categoricalValues"] = list(p.values)
        else:
            item["discreteValues"] = [plain_number(v) for v in p.values]
        if p.scale:
            item["scaleType"] = p.scale
        params.append(item)
    out["params"] = params
    return out
