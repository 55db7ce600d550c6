"""The search, on Optuna: TPE for the cloud's default (Bayesian) algorithm, GridSampler for
GRID_SEARCH, RandomSampler for RANDOM_SEARCH, MedianPruner for early stopping. Studies live in
one SQLite file under MULTIWORKER_HOME/studies/ (Optuna's RDB storage), so a run resumes."""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

from multiworker.errors import UserError
from multiworker.tune.model import Param, Study

__all__ = ["studies_dir", "storage", "open_study", "load_study", "study_names", "suggest", "trainer_values",
           "interrupted_numbers", "mark_interrupted", "stored_config", "stored_study"]

log = logging.getLogger(__name__)

_CONFIG_ATTR = "multiworker_study"
_INTERRUPTED_ATTR = "interrupted_trials"


def _optuna():
    try:
        import optuna
    except ModuleNotFoundError as exc:
        raise UserError("tuning needs Optuna; pip install 'multiworker[tune]'") from exc
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def studies_dir(home: Path) -> Path:
    return home / "studies"


def storage(home: Path):
    """Optuna's RDB storage on MULTIWORKER_HOME/studies/studies.db."""
    optuna = _optuna()
    folder = studies_dir(home)
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    folder.chmod(0o700)
    db = folder / "studies.db"
    os.close(os.open(db, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600))  # SQLite's journals take its mode
    for path in (db, folder / "studies.db-wal", folder / "studies.db-shm", folder / "studies.db-journal"):
        if path.exists():
            path.chmod(0o600)
    return optuna.storages.RDBStorage(f"sqlite:///{folder / 'studies.db'}",
                                      engine_kwargs={"connect_args": {"timeout": 30}})


def study_names(home: Path) -> list[str]:
    if not (studies_dir(home) / "studies.db").exists():
        return []
    return sorted(_optuna().get_all_study_names(storage(home)))


def _sampler(study: Study, seed: int | None):
    optuna = _optuna()
    if study.algorithm == "GRID_SEARCH":
        class Grid(optuna.samplers.GridSampler):
            """The tuning loop stops asking once the grid is covered; GridSampler's own
            ``study.stop()`` works only inside ``study.optimize``."""

            def after_trial(self, study, trial, state, values) -> None:
                return None

        return Grid({p.name: p.grid() for p in study.params}, seed=seed)
    if study.algorithm == "RANDOM_SEARCH":
        return optuna.samplers.RandomSampler(seed=seed)
    # Few trials are typical locally: start modelling after a handful, not Optuna's default ten.
    return optuna.samplers.TPESampler(n_startup_trials=max(2, min(10, study.max_trials // 3)), seed=seed,
                                      constant_liar=True)


def _pruner(study: Study):
    optuna = _optuna()
    if not study.early_stopping:
        return optuna.pruners.NopPruner()
    return optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0)


def _fingerprint(study: Study) -> str:
    """What must not change between a study and its resumption: the search space and the metric."""
    return study.model_dump_json(include={"metric", "goal", "params", "algorithm", "measurement"})


def open_study(home: Path, name: str, study: Study, *, resume: bool, seed: int | None = None):
    """Create the Optuna study ``name``, or with ``resume`` load it (same search space required)."""
    optuna = _optuna()
    store = storage(home)
    exists = name in optuna.get_all_study_names(store)
    if exists and not resume:
        raise UserError(f"--study {name}: a study of that name exists; add --resume to continue it, "
                        f"or give another --study name (`multiworker tune show {name}` shows it)")
    if resume and not exists:
        raise UserError(f"--resume: there is no study {name!r} to resume; run without --resume to start it")
    direction = "maximize" if study.goal == "MAXIMIZE" else "minimize"
    ostudy = optuna.create_study(storage=store, study_name=name, direction=direction, load_if_exists=True,
                                 sampler=_sampler(study, seed), pruner=_pruner(study))
    stored = ostudy.user_attrs.get(_CONFIG_ATTR)
    if stored is None:
        ostudy.set_user_attr(_CONFIG_ATTR, _fingerprint(study))
    elif stored != _fingerprint(study):
        raise UserError(f"--resume: study {name!r} was started with another search space, metric or algorithm; "
                        "resume it with the same tuning config, or start a new --study")
    return ostudy


def load_study(home: Path, name: str):
    """An existing study for reading, or a one-line error listing the studies."""
    optuna = _optuna()
    names = study_names(home)
    if name not in names:
        known = ", ".join(names) if names else "none yet"
        raise UserError(f"no study {name!r}; studies: {known}")
    return optuna.load_study(study_name=name, storage=storage(home))


def stored_config(ostudy) -> dict:
    """The study's metric, goal, parameters and algorithm as stored when it was created."""
    import json

    text = ostudy.user_attrs.get(_CONFIG_ATTR)
    return json.loads(text) if text else {}


def stored_study(ostudy) -> Study | None:
    text = ostudy.user_attrs.get(_CONFIG_ATTR)
    return Study.model_validate_json(text) if text else None


def interrupted_numbers(ostudy) -> set[int]:
    return set(ostudy.user_attrs.get(_INTERRUPTED_ATTR, []))


def mark_interrupted(ostudy, frozen) -> None:
    """A trial stopped by an interruption: recorded failed, and its parameters queued to run again."""
    optuna = _optuna()
    ostudy.tell(frozen.number, state=optuna.trial.TrialState.FAIL, skip_if_finished=True)
    ostudy.set_user_attr(_INTERRUPTED_ATTR, sorted(interrupted_numbers(ostudy) | {frozen.number}))
    if frozen.params:
        ostudy.enqueue_trial(frozen.params, user_attrs={"rerun_of": frozen.number + 1})


def suggest(trial, study: Study) -> dict:
    """Ask the sampler for every parameter; returns the values the trainer gets."""
    internal = {p.name: _suggest_one(trial, p) for p in study.params}
    values = trainer_values(internal, study)
    trial.set_user_attr("values", values)
    return values


def _suggest_one(trial, p: Param):
    if p.type == "CATEGORICAL":
        return trial.suggest_categorical(p.name, list(p.values))
    if p.type == "DISCRETE":
        return trial.suggest_categorical(p.name, list(p.values))
    log_scale = p.scale in ("UNIT_LOG_SCALE", "UNIT_REVERSE_LOG_SCALE")
    if p.type == "INTEGER":
        return trial.suggest_int(p.name, int(p.min_value), int(p.max_value), log=log_scale)
    return trial.suggest_float(p.name, p.min_value, p.max_value, log=log_scale)


def trainer_values(internal: dict, study: Study) -> dict:
    """From the sampler's values to the trainer's: a reverse-log parameter is sampled as
    y on a log scale and passed as min + max - y, dense near the top of its range."""
    out = dict(internal)
    for p in study.params:
        if p.name not in internal:
            continue
        value = internal[p.name]
        if p.scale == "UNIT_REVERSE_LOG_SCALE" and p.type in ("DOUBLE", "INTEGER"):
            value = p.min_value + p.max_value - value
            value = int(round(value)) if p.type == "INTEGER" else float(value)
        if isinstance(value, float) and not math.isfinite(value):
            raise UserError(f"parameter {p.name}: the sampler gave {value}")
        out[p.name] = value
    return out
