"""Vertex AI's HyperparameterTuningJob: ``studySpec`` + ``trialJobSpec`` (a CustomJobSpec) and the
trial counts, read and written. Field names as in google.cloud.aiplatform_v1 (StudySpec,
HyperparameterTuningJob); camelCase as in the REST form, snake_case accepted too."""

from __future__ import annotations

from typing import Any

from pydantic.alias_generators import to_snake

from multiworker.errors import SpecError
from multiworker.spec.formats.common import CamelModel, Str, validate
from multiworker.spec.formats.vertex import VertexJobOutput
from multiworker.tune.model import (
    ALGORITHMS,
    DEFAULT_METRIC_TAG,
    GOALS,
    MEASUREMENTS,
    SCALES,
    Study,
    check_study,
    choose,
    make_param,
    plain_number,
)

__all__ = ["read", "write", "JOB_KEYS"]

_VALUE_SPECS = (("doubleValueSpec", "DOUBLE"), ("integerValueSpec", "INTEGER"),
                ("categoricalValueSpec", "CATEGORICAL"), ("discreteValueSpec", "DISCRETE"))
# Keys of a HyperparameterTuningJob besides studySpec: counts, the trial job, output-only fields.
JOB_KEYS = ("displayName", "maxTrialCount", "parallelTrialCount", "maxFailedTrialCount", "trialJobSpec")


class RangeSpec(CamelModel):
    min_value: float
    max_value: float
    default_value: float | None = None


class CategoricalSpec(CamelModel):
    values: list[Str]
    default_value: Str | None = None


class DiscreteSpec(CamelModel):
    values: list[float]
    default_value: float | None = None


class ParameterSpec(CamelModel):
    parameter_id: str
    scale_type: str | None = None
    double_value_spec: RangeSpec | None = None
    integer_value_spec: RangeSpec | None = None
    categorical_value_spec: CategoricalSpec | None = None
    discrete_value_spec: DiscreteSpec | None = None
    conditional_parameter_specs: list[dict] | None = None


class MetricSpec(CamelModel):
    metric_id: str
    goal: str | None = None
    safety_config: dict | None = None


class StudySpec(CamelModel):
    metrics: list[MetricSpec]
    parameters: list[ParameterSpec]
    algorithm: str | None = None
    observation_noise: str | None = None
    measurement_selection_type: str | None = None
    decay_curve_stopping_spec: dict | None = None
    median_automated_stopping_spec: dict | None = None
    convex_automated_stopping_spec: dict | None = None
    study_stopping_config: dict | None = None


class TuningJob(VertexJobOutput):
    """A HyperparameterTuningJob; output-only fields are accepted and ignored."""

    display_name: str | None = None
    study_spec: StudySpec
    max_trial_count: int | None = None
    parallel_trial_count: int | None = None
    max_failed_trial_count: int | None = None
    trial_job_spec: dict | None = None
    labels: dict[str, str] | None = None
    encryption_spec: dict | None = None
    trials: list[dict] | None = None  # output only


def read(data: dict, *, source: str, notes: list[str]) -> tuple[Study, TuningJob]:
    """A HyperparameterTuningJob (or its studySpec with the counts) into a :class:`Study`."""
    style = "snake" if "study_spec" in data else "camel"
    key = to_snake if style == "snake" else str
    job = validate(TuningJob, data, source=source, style=style)
    spec = job.study_spec
    at = f"{key('studySpec')}."
    if len(spec.metrics) != 1:
        raise SpecError(f"has {len(spec.metrics)} metrics; a local study optimizes exactly one (give one "
                        "metricId and goal)", source=source, field=f"{at}metrics")
    metric = spec.metrics[0]
    params = [_param(p, i, source=source, at=at, key=key, notes=notes) for i, p in enumerate(spec.parameters)]
    stopping = [name for name in ("decayCurveStoppingSpec", "medianAutomatedStoppingSpec",
                                  "convexAutomatedStoppingSpec") if getattr(spec, to_snake(name)) is not None]
    if "convexAutomatedStoppingSpec" in stopping:
        raise SpecError("is not supported locally; use medianAutomatedStoppingSpec: {} (a median pruner)",
                        source=source, field=f"{at}{key('convexAutomatedStoppingSpec')}")
    if "decayCurveStoppingSpec" in stopping:
        notes.append(f"{at}{key('decayCurveStoppingSpec')}: stops trials with a median rule locally")
    for name in ("observationNoise", "studyStoppingConfig"):
        if getattr(spec, to_snake(name)) is not None:
            notes.append(f"{at}{key(name)} has no effect locally")
    if metric.safety_config:
        notes.append(f"{at}{key('metrics')}[0].{key('safetyConfig')} has no effect locally")
    measurement = spec.measurement_selection_type
    if measurement in (None, "MEASUREMENT_SELECTION_TYPE_UNSPECIFIED"):
        measurement = "LAST_MEASUREMENT"
    algorithm = spec.algorithm if spec.algorithm is not None else "ALGORITHM_UNSPECIFIED"
    goal = None if metric.goal in (None, "GOAL_TYPE_UNSPECIFIED") else metric.goal
    study = Study(
        metric=metric.metric_id or DEFAULT_METRIC_TAG,
        goal=choose(goal, GOALS, source=source, field=f"{at}{key('metrics')}[0].goal") or "MAXIMIZE",
        params=tuple(params),
        max_trials=1 if job.max_trial_count is None else job.max_trial_count,
        parallel_trials=1 if job.parallel_trial_count is None else job.parallel_trial_count,
        max_failed_trials=job.max_failed_trial_count or 0,
        algorithm=choose(algorithm, ALGORITHMS, source=source, field=f"{at}algorithm"),
        early_stopping=bool(stopping),
        measurement=choose(measurement, MEASUREMENTS, source=source, field=f"{at}{key('measurementSelectionType')}"),
    )
    fields = {"params": f"{at}parameters", "max_trials": key("maxTrialCount"),
              "parallel_trials": key("parallelTrialCount"), "max_failed_trials": key("maxFailedTrialCount"),
              "algorithm": f"{at}algorithm", "metric": f"{at}{key('metrics')}[0].{key('metricId')}"}
    return check_study(study, source=source, fields=fields), job


def _param(p: ParameterSpec, i: int, *, source: str, at: str, key, notes: list[str]):
    where = f"{at}{key('parameters')}[{i}]"
    given = [(name, ptype) for name, ptype in _VALUE_SPECS if getattr(p, to_snake(name)) is not None]
    if len(given) != 1:
        names = ", ".join(key(n) for n, _ in _VALUE_SPECS)
        message = "has no value spec" if not given else f"has {len(given)} value specs"
        raise SpecError(f"{message}; give exactly one of {names}", source=source, field=where)
    spec_name, ptype = given[0]
    value_spec = getattr(p, to_snake(spec_name))
    spec_at = f"{where}.{key(spec_name)}"
    if p.conditional_parameter_specs:
        raise SpecError("conditional parameters are not supported locally; make them top-level parameters",
                        source=source, field=f"{where}.{key('conditionalParameterSpecs')}")
    if value_spec.default_value is not None:
        notes.append(f"{spec_at}.{key('defaultValue')} is ignored (Vertex AI ignores it for tuning jobs too)")
    scale = None if p.scale_type in (None, "SCALE_TYPE_UNSPECIFIED") else choose(
        p.scale_type, SCALES, source=source, field=f"{where}.{key('scaleType')}")
    ranged = ptype in ("DOUBLE", "INTEGER")
    return make_param(
        name=p.parameter_id, type=ptype, scale=scale, source=source,
        min_value=value_spec.min_value if ranged else None,
        max_value=value_spec.max_value if ranged else None,
        values=None if ranged else list(value_spec.values),
        fields={"name": f"{where}.{key('parameterId')}", "type": spec_at, "min": f"{spec_at}.{key('minValue')}",
                "max": f"{spec_at}.{key('maxValue')}", "values": f"{spec_at}.values",
                "scale": f"{where}.{key('scaleType')}"},
    )


def write(study: Study) -> dict:
    """The studySpec and trial counts of a HyperparameterTuningJob for ``study``."""
    metric: dict[str, Any] = {"metricId": study.metric, "goal": study.goal}
    spec: dict[str, Any] = {"metrics": [metric], "parameters": [_write_param(p) for p in study.params]}
    if study.algorithm != "ALGORITHM_UNSPECIFIED":
        spec["algorithm"] = study.algorithm
    if study.measurement != "LAST_MEASUREMENT":
        spec["measurementSelectionType"] = study.measurement
    if study.early_stopping:
        spec["medianAutomatedStoppingSpec"] = {}
    out: dict[str, Any] = {"studySpec": spec, "maxTrialCount": study.max_trials,
                           "parallelTrialCount": study.parallel_trials}
    if study.max_failed_trials:
        out["maxFailedTrialCount"] = study.max_failed_trials
    return out


def _write_param(p) -> dict:
    item: dict[str, Any] = {"parameterId": p.name}
    if p.type == "DOUBLE":
        item["doubleValueSpec"] = {"minValue": p.min_value, "maxValue": p.max_value}
    elif p.type == "INTEGER":
        item["integerValueSpec"] = {"minValue": int(p.min_value), "maxValue": int(p.max_value)}
    elif p.type == "CATEGORICAL":
        item["categoricalValueSpec"] = {"values": list(p.values)}
    else:
        item["discreteValueSpec"] = {"values": [plain_number(v) for v in p.values]}
    if p.scale:
        item["scaleType"] = p.scale
    return item
