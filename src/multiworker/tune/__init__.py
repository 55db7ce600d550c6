"""Hyperparameter tuning with the cloud's configs and the cloud's hypertune protocol: each trial a
whole multi-worker job, the search on Optuna, the study stored so an interrupted run resumes.

    config.read_config(path)   -> TuningConfig (AI Platform hyperparameters or a Vertex studySpec)
    model.Study                   the one internal study both forms read into
    runner.Tuner                  runs the trials; search (Optuna), hypertune (metric file), jobs
    results                       table rows, best trial, plot; convert: write either form
"""

from multiworker.tune.config import JobRef, TuningConfig, read_config
from multiworker.tune.model import Param, Study

__all__ = ["JobRef", "TuningConfig", "read_config", "Param", "Study"]
