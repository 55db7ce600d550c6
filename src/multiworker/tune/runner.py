"""The tuning loop: ask the sampler for a trial's parameters, run the trial as a whole job with
them as ``--name=value`` trainer args, read its hypertune metric, tell the study; up to
``parallel`` trials at a time, until the study has ``max_trials`` finished trials."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from multiworker.job import Store
from multiworker.private_files import write_private_text
from multiworker.spec.load import LoadedSpec
from multiworker.status import refresh_liveness
from multiworker.tune import hypertune, search
from multiworker.tune.jobs import create_trial_job, start_job, stop_job
from multiworker.tune.model import Study

__all__ = ["TrialSetup", "Tuner", "DEFAULT_FAILED_LIMIT"]

log = logging.getLogger(__name__)

# maxFailedTrials 0 lets the service decide; here: stop after this many failures and no success.
DEFAULT_FAILED_LIMIT = 3
_POLL = 1.0


@dataclasses.dataclass
class TrialSetup:
    """How a trial's job is made: ``load()`` gives the job spec, run by ``backend`` with its
    ``backend_options``; ``trainer_args`` go before the parameters."""

    load: Callable[[], LoadedSpec]
    backend: str = "local"
    trainer_args: tuple[str, ...] = ()
    backend_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class _Running:
    trial: object  # optuna.Trial
    number: int  # the cloud's trial id: 1, 2, ...
    job_id: str
    proc: object
    metric_file: Path
    started: float
    reported: set = dataclasses.field(default_factory=set)
    refused: str | None = None  # why the metric file was not read


class Tuner:
    """Runs the remaining trials of one study; ``on_event(kind, info)`` hears about each trial."""

    def __init__(self, store: Store, study: Study, ostudy, setup: TrialSetup, *, name: str,
                 on_event: Callable[[str, dict], None] | None = None):
        self.store, self.study, self.ostudy, self.setup, self.name = store, study, ostudy, setup, name
        self.on_event = on_event or (lambda kind, info: None)
        self.trials_dir = search.studies_dir(store.home) / name
        self.running: list[_Running] = []
        self.parallel = 1
        self._warned_no_steps = False

    # -- bookkeeping -----------------------------------------------------------------
    def counts(self) -> dict[str, int]:
        """Finished trials by outcome; interrupted ones do not count (their parameters run again)."""
        from optuna.trial import TrialState

        interrupted = search.interrupted_numbers(self.ostudy)
        out = {"complete": 0, "pruned": 0, "failed": 0, "interrupted": 0, "running": 0}
        for t in self.ostudy.get_trials(deepcopy=False):
            if t.state == TrialState.COMPLETE:
                out["complete"] += 1
            elif t.state == TrialState.PRUNED:
                out["pruned"] += 1
            elif t.state == TrialState.FAIL:
                out["interrupted" if t.number in interrupted else "failed"] += 1
            elif t.state == TrialState.RUNNING:
                out["running"] += 1
        return out

    def recover(self) -> list[int]:
        """Trials left Running by a tuner that died: recorded failed, their parameters queued again."""
        from optuna.trial import TrialState

        stale = [t for t in self.ostudy.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
        for t in stale:
            job_id = t.user_attrs.get("job_id")
            if job_id and self.store.has_job(job_id):
                refresh_liveness(self.store, job_id)  # records Lost and stops strays
            search.mark_interrupted(self.ostudy, t)
        return [t.number + 1 for t in stale]

    def _failed_limit_reached(self, c: dict) -> bool:
        if self.study.max_failed_trials:
            return c["failed"] >= self.study.max_failed_trials
        return c["failed"] >= DEFAULT_FAILED_LIMIT and not c["complete"]

    # -- the loop --------------------------------------------------------------------
    def run(self, *, max_trials: int, parallel: int) -> str:
        """Run until ``max_trials`` trials have finished; returns why it stopped:
        ``done``, ``failed-limit`` or ``grid-exhausted``. Ctrl-C stops the running trials first."""
        try:
            return self._loop(max_trials, parallel)
        except BaseException:
            self._interrupt_all()
            raise

    def _loop(self, max_trials: int, parallel: int) -> str:
        grid = self.study.grid_size() if self.study.algorithm == "GRID_SEARCH" else None
        limit = max_trials if grid is None else min(max_trials, grid)
        self.parallel = parallel
        while True:
            c = self.counts()
            finished = c["complete"] + c["pruned"] + c["failed"]
            stop = self._failed_limit_reached(c)
            while not stop and len(self.running) < parallel and finished + len(self.running) < limit:
                self._launch()
            if not self.running:
                if stop:
                    return "failed-limit"
                return "grid-exhausted" if limit < max_trials else "done"
            time.sleep(_POLL)
            for run in list(self.running):
                self._poll(run)

    def _launch(self) -> None:
        trial = self.ostudy.ask()
        number = trial.number + 1
        values = search.suggest(trial, self.study)
        args = [p.arg(values[p.name]) for p in self.study.params]
        trial_dir = self.trials_dir / f"trial-{number}"
        trial_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        metric_file = trial_dir / "hypertune.metrics"
        metric_file.unlink(missing_ok=True)
        write_private_text(metric_file, "")  # 0600: the trial's alone
        loaded = self._trial_spec(number, metric_file)
        job_id = create_trial_job(self.store, loaded, backend=self.setup.backend,
                                  backend_options=self.setup.backend_options,
                                  trainer_args=[*self.setup.trainer_args, *args], study=self.name, trial=number)
        for key, value in (("job_id", job_id), ("args", args), ("metric_file", str(metric_file))):
            trial.set_user_attr(key, value)
        proc = start_job(self.store, job_id)
        self.running.append(_Running(trial, number, job_id, proc, metric_file, time.time()))
        self.on_event("started", {"trial": number, "job_id": job_id, "args": args,
                                  "rerun_of": trial.user_attrs.get("rerun_of")})

    def _trial_spec(self, number: int, metric_file: Path) -> LoadedSpec:
        """The job with the trial's name, hypertune environment and (if set) its own output dir."""
        loaded = self.setup.load()
        spec = loaded.spec
        env = {**(spec.env or {}), "CLOUD_ML_HP_METRIC_FILE": str(metric_file), "CLOUD_ML_TRIAL_ID": str(number),
               "CLOUD_ML_HP_METRIC_TAG": self.study.metric}
        update: dict = {"name": f"{self.name}-trial-{number}"[:63], "env": env}
        if spec.output_dir:  # as Vertex AI does: <baseOutputDirectory>/<trial id>/
            update["output_dir"] = f"{spec.output_dir.rstrip('/')}/{number}"
        if spec.threads_per_replica is None:  # share the cores among the parallel trials' replicas
            replicas = max(1, sum(spec.replica_counts().values()))
            update["threads_per_replica"] = max(1, (os.cpu_count() or 1) // (replicas * self.parallel))
        return dataclasses.replace(loaded, spec=spec.model_copy(update=update))

    def _measurements(self, run: _Running) -> list:
        """The trial's reports from its own file (never the shared default one: anyone may write that)."""
        try:
            return hypertune.read_measurements(run.metric_file, self.study.metric, trial=str(run.number))
        except hypertune.MetricFileRefused as exc:
            if run.refused is None:
                run.refused = str(exc)
            return []

    def _poll(self, run: _Running) -> None:
        done = run.proc.poll() is not None
        if self.study.early_stopping and not done and self._report(run):
            stop_job(self.store, run.job_id, run.proc, grace=30)
            self._tell(run, "pruned", None, "stopped early: below the median of earlier trials at the same step")
            return
        if not done:
            return
        job = refresh_liveness(self.store, run.job_id)  # a driver that died unrecorded: Lost
        state = job.state
        measurements = self._measurements(run)
        source = str(run.metric_file)
        if self.study.early_stopping:
            self._report(run, measurements)
        value = hypertune.final_value(measurements, measurement=self.study.measurement, goal=self.study.goal)
        run.trial.set_user_attr("metric_source", source)
        run.trial.set_user_attr("job_state", state)
        if state != "Succeeded":
            self._tell(run, "failed", value, f"job {run.job_id} {state}: {job.message or ''}".strip())
        elif run.refused is not None:
            self._tell(run, "failed", None, run.refused)
        elif value is None:
            self._tell(run, "failed", None, f"no {self.study.metric!r} report in {run.metric_file}: report it with "
                       f"hypertune's report_hyperparameter_tuning_metric(hyperparameter_metric_tag="
                       f"'{self.study.metric}', ...)")
        else:
            self._tell(run, "complete", value, f"{len(measurements)} report(s) from {source}")

    def _report(self, run: _Running, measurements: list | None = None) -> bool:
        """Pass new intermediate values to the pruner; True if it says stop."""
        if measurements is None:
            measurements = self._measurements(run)
        steps = hypertune.by_step(measurements)
        new = sorted(set(steps) - run.reported)
        for step in new:
            run.trial.report(steps[step], step)
            run.reported.add(step)
        if run.proc.poll() is not None and not steps and not self._warned_no_steps:
            self._warned_no_steps = True
            self.on_event("note", {"message": f"early stopping: trial {run.number} reported no intermediate "
                                              "values (hypertune lines with a global_step); nothing to prune on"})
        return bool(new) and run.trial.should_prune()

    def _tell(self, run: _Running, outcome: str, value: float | None, message: str) -> None:
        from optuna.trial import TrialState

        seconds = round(time.time() - run.started, 1)
        run.trial.set_user_attr("seconds", seconds)
        run.trial.set_user_attr("message", message)
        if outcome == "complete":
            self.ostudy.tell(run.trial, value)
        else:
            if value is not None:
                run.trial.set_user_attr("last_value", value)
            state = TrialState.PRUNED if outcome == "pruned" else TrialState.FAIL
            self.ostudy.tell(run.trial, state=state)
        self.running.remove(run)
        self.on_event(outcome, {"trial": run.number, "job_id": run.job_id, "value": value, "seconds": seconds,
                                "message": message})

    def _interrupt_all(self) -> None:
        from optuna.trial import TrialState

        for run in list(self.running):
            stop_job(self.store, run.job_id, run.proc, grace=30)
            self.running.remove(run)
            frozen = self.ostudy.get_trials(deepcopy=False)[run.trial.number]
            if frozen.state != TrialState.RUNNING:  # told already, just before the interruption
                continue
            run.trial.set_user_attr("message", "interrupted; its parameters run again on --resume")
            search.mark_interrupted(self.ostudy, frozen)
            self.on_event("interrupted", {"trial": run.number, "job_id": run.job_id})
