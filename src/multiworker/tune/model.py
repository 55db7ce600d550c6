"""The study a tuning run searches: the metric and goal, the parameters and their ranges, the
trial budget and the algorithm. AI Platform's ``hyperparameters`` and Vertex AI's ``studySpec``
both read into this one model, and both are written from it."""

from __future__ import annotations

import difflib
import math
import re
from typing import Literal, Union

from pydantic import BaseModel, ConfigDict

from multiworker.errors import SpecError

__all__ = [
    "Param", "Study", "GOALS", "TYPES", "SCALES", "ALGORITHMS", "MEASUREMENTS", "DEFAULT_METRIC_TAG",
    "make_param", "choose", "check_study",
]

GOALS = ("MAXIMIZE", "MINIMIZE")
TYPES = ("DOUBLE", "INTEGER", "CATEGORICAL", "DISCRETE")
SCALES = ("UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE")
ALGORITHMS = ("ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH")
MEASUREMENTS = ("LAST_MEASUREMENT", "BEST_MEASUREMENT")
# cloudml-hypertune's tag when the trainer names none (and the study's when it names none).
DEFAULT_METRIC_TAG = "training/hptuning/metric"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
# Caps, so that a config cannot ask for more than a machine can hold or a float can say.
MAX_PARAMS = 100
MAX_VALUES = 10_000  # values of one CATEGORICAL or DISCRETE parameter
MAX_CATEGORY = 1_000  # characters of one categorical value
MAX_GRID = 100_000  # points GRID_SEARCH enumerates
MAX_INTEGER = 2**53  # INTEGER bounds: exact as floats (Optuna stores parameters as floats)
MAX_DOUBLE = 1e300  # DOUBLE bounds: max - min stays finite


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Param(_Frozen):
    """One parameter, passed to every replica as ``--name=value``."""

    name: str
    type: Literal["DOUBLE", "INTEGER", "CATEGORICAL", "DISCRETE"]
    min_value: Union[float, None] = None
    max_value: Union[float, None] = None
    values: Union[tuple[str, ...], tuple[float, ...], None] = None
    scale: Union[Literal["UNIT_LINEAR_SCALE", "UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE"], None] = None

    def grid(self) -> list | None:
        """Every value this parameter can take, or None for a DOUBLE range (no grid)."""
        if self.type == "INTEGER":
            return list(range(int(self.min_value), int(self.max_value) + 1))
        if self.type in ("CATEGORICAL", "DISCRETE"):
            return [plain_number(v) for v in self.values]
        return None

    def arg(self, value) -> str:
        """The trainer flag, as the cloud services pass it: ``--name=value``."""
        return f"--{self.name}={plain_number(value)}"


class Study(_Frozen):
    """What to search and how; defaults are the cloud services' defaults."""

    metric: str = DEFAULT_METRIC_TAG
    goal: Literal["MAXIMIZE", "MINIMIZE"] = "MAXIMIZE"
    params: tuple[Param, ...]
    max_trials: int = 1
    parallel_trials: int = 1
    max_failed_trials: int = 0
    algorithm: Literal["ALGORITHM_UNSPECIFIED", "GRID_SEARCH", "RANDOM_SEARCH"] = "ALGORITHM_UNSPECIFIED"
    early_stopping: bool = False
    measurement: Literal["LAST_MEASUREMENT", "BEST_MEASUREMENT"] = "LAST_MEASUREMENT"

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def grid_size(self) -> int | None:
        """How many points GRID_SEARCH can try (None if a parameter has no grid); counted, not listed."""
        size = 1
        for p in self.params:
            if p.type == "DOUBLE":
                return None
            size *= int(p.max_value) - int(p.min_value) + 1 if p.type == "INTEGER" else len(p.values or ())
        return size


def plain_number(value):
    """A discrete value as the trainer expects it: 8, not 8.0."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def choose(value: str | None, allowed: tuple[str, ...], *, source: str, field: str, aliases: dict | None = None):
    """An enum value from the file, or a one-line error with a did-you-mean hint."""
    if value is None:
        return None
    text = str(value).strip().upper()
    text = (aliases or {}).get(text, text)
    if text in allowed:
        return text
    hint = [a for a in allowed if a.startswith(text)] or difflib.get_close_matches(text, allowed, n=1, cutoff=0.5)
    fix = f"did you mean {hint[0]}?" if hint else f"use one of {', '.join(allowed)}"
    raise SpecError(f"{value!r} is not allowed; {fix}", source=source, field=field)


def make_param(*, name: str, type: str, min_value=None, max_value=None, values=None, scale: str | None = None,
               source: str, fields: dict[str, str]) -> Param:
    """A checked :class:`Param`; ``fields`` names where name/type/min/max/values/scale sit in the file."""
    def fail(key: str, message: str):
        raise SpecError(message, source=source, field=fields[key])

    if not _NAME.match(name or ""):
        fail("name", f"{name!r} cannot be a flag name; use letters, digits and _ . - (it becomes --{name or 'NAME'}=VALUE)")
    if type in ("DOUBLE", "INTEGER"):
        if values is not None:
            fail("values", f"a {type} parameter takes minValue and maxValue, not a list of values; remove it")
        cap = MAX_INTEGER if type == "INTEGER" else MAX_DOUBLE
        for key, v in (("min", min_value), ("max", max_value)):
            if v is None:
                fail(key, f"is required for a {type} parameter")
            if not math.isfinite(v):
                fail(key, f"is {v}; give a finite number")
            if abs(v) > cap:
                fail(key, f"is {v:g}; a {type} bound must lie between -{cap:g} and {cap:g}")
            if type == "INTEGER" and float(v) != int(v):
                fail(key, f"is {v}; an INTEGER parameter needs whole numbers")
        if min_value >= max_value:
            fail("max", f"is {max_value}, not above the minimum {min_value}; give a range with min < max")
        if scale in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE") and min_value <= 0:
            fail("min", f"is {min_value}; {scale} needs a strictly positive range")
        return Param(name=name, type=type, min_value=float(min_value), max_value=float(max_value), scale=scale)
    if min_value is not None or max_value is not None:
        fail("min" if min_value is not None else "max", f"does not apply to a {type} parameter; list its values instead")
    if not values:
        fail("values", f"is required for a {type} parameter: give at least one value")
    if len(values) > MAX_VALUES:
        fail("values", f"has {len(values)} values; at most {MAX_VALUES}")
    if type == "CATEGORICAL":
        if scale is not None:
            fail("scale", "does not apply to a CATEGORICAL parameter; remove it")
        if len(set(values)) != len(values):
            fail("values", "has repeated values; list each category once")
        for v in values:
            text = str(v)
            if "\0" in text:
                fail("values", f"{text[:40]!r} holds a NUL character, which no program argument can; remove it")
            if len(text) > MAX_CATEGORY:
                fail("values", f"has a value of {len(text)} characters; at most {MAX_CATEGORY}")
        return Param(name=name, type=type, values=tuple(str(v) for v in values))
    numbers = [float(v) for v in values]
    bad = next((v for v in numbers if not math.isfinite(v) or abs(v) > MAX_DOUBLE), None)
    if bad is not None:
        fail("values", f"holds {bad}; give finite numbers between -{MAX_DOUBLE:g} and {MAX_DOUBLE:g}")
    if any(b <= a for a, b in zip(numbers, numbers[1:])):
        fail("values", f"{values} is not strictly increasing; sort the values and drop repeats")
    return Param(name=name, type=type, values=tuple(numbers), scale=scale)


def check_study(study: Study, *, source: str, fields: dict[str, str]) -> Study:
    """Checks across fields: counts, unique names, grid search needs a grid."""
    def fail(key: str, message: str):
        raise SpecError(message, source=source, field=fields[key])

    if not study.params:
        fail("params", "lists no parameters; give at least one to tune")
    if len(study.params) > MAX_PARAMS:
        fail("params", f"lists {len(study.params)} parameters; at most {MAX_PARAMS}")
    seen: set[str] = set()
    for p in study.params:
        if p.name in seen:
            fail("params", f"names {p.name!r} twice; each parameter once")
        seen.add(p.name)
    if study.max_trials < 1:
        fail("max_trials", f"is {study.max_trials}; run at least 1 trial")
    if study.parallel_trials < 1:
        fail("parallel_trials", f"is {study.parallel_trials}; run at least 1 trial at a time")
    if study.max_failed_trials < 0:
        fail("max_failed_trials", f"is {study.max_failed_trials}; give 0 (the default rule) or more")
    if study.algorithm == "GRID_SEARCH":
        doubles = [p.name for p in study.params if p.type == "DOUBLE"]
        if doubles:
            fail("algorithm", f"GRID_SEARCH needs INTEGER, CATEGORICAL or DISCRETE parameters; {doubles[0]} is "
                              "DOUBLE: make it DISCRETE with the values to try, or use RANDOM_SEARCH")
        size = study.grid_size() or 0
        if size > MAX_GRID:
            fail("algorithm", f"the grid has {size:,} points; GRID_SEARCH takes at most {MAX_GRID:,}: narrow the "
                              "ranges, list fewer values, or use RANDOM_SEARCH")
    if not study.metric or " " in study.metric:
        fail("metric", f"{study.metric!r} is not a metric tag; give the tag the trainer reports (no spaces)")
    return study
