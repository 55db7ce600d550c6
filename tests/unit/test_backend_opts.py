"""Backend options on the command line come from the backends' models: a backend registered here
(no CLI module knows it) gets its flags, its --backend-opt keys and its help section; another
backend's flag names its owner; a typo gets a did-you-mean; what follows `--` is left alone."""

from __future__ import annotations

import json
from typing import Optional

import pytest
import typer
from pydantic import Field
from typer.testing import CliRunner

from multiworker.backends import base
from multiworker.backends.base import Backend, BackendOptions
from multiworker.cli.backend_opts import BackendCommand, backend_options
from multiworker.errors import UserError


class ToyOptions(BackendOptions):
    greeting: str = Field("hello", description="what it says")
    loud: bool = Field(False, description="say it loudly")
    times: int = Field(1, gt=0, description="how often")


class ToyBackend(Backend):
    name = "toy"
    Options = ToyOptions

    def drive(self, record, options, journal):  # pragma: no cover - never run here
        raise NotImplementedError

    def cancel(self, store, job, *, timeout=None):  # pragma: no cover
        raise NotImplementedError


@pytest.fixture(autouse=True)
def toy_backend(monkeypatch):
    monkeypatch.setitem(base.BACKENDS, "toy", f"{__name__}:ToyBackend")


def _probe(
    ctx: typer.Context,
    spec: str = typer.Argument(...),
    trainer_args: Optional[list[str]] = typer.Argument(None),
    backend: str = typer.Option("local", "--backend"),
    backend_opt: list[str] = typer.Option([], "--backend-opt", "-B"),
    image: Optional[str] = typer.Option(None, "--image"),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
) -> None:
    """Print what a command that runs a job would get."""
    typer.echo(json.dumps({"spec": spec, "options": backend_options(ctx, backend, backend_opt),
                           "trainer_args": trainer_args or [], "quiet": quiet}))


@pytest.fixture
def cli():
    app = typer.Typer()
    app.command("probe", cls=BackendCommand, context_settings={"allow_interspersed_args": True})(_probe)
    app.command("noop", hidden=True)(lambda: None)  # a typer app with one command would take no name
    runner = CliRunner()

    def invoke(*args: str):
        result = runner.invoke(app, ["probe", *args], catch_exceptions=True)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            return result.exception
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)

    return invoke


@pytest.mark.parametrize("args, options", [
    (["--backend", "toy", "--greeting", "hi"], {"greeting": "hi"}),
    (["--greeting=hi", "--backend=toy"], {"greeting": "hi"}),  # a flag before --backend
    (["--backend", "toy", "--loud", "--times", "3"], {"loud": True, "times": 3}),
    (["--backend", "toy", "--loud", "--no-loud"], {"loud": False}),
    (["--backend", "toy", "-B", "greeting=hi", "--backend-opt", "times=2"], {"greeting": "hi", "times": 2}),
    (["--backend", "toy", "-B", "loud=true"], {"loud": True}),
    (["--backend", "toy"], {}),
], ids=["flag", "equals-and-order", "bool-and-int", "negated", "backend-opt", "backend-opt-bool", "none"])
def test_flags_map_onto_the_chosen_backends_fields(cli, args, options):
    got = cli("job.yaml", *args)
    assert got["options"] == options and got["spec"] == "job.yaml"


def test_what_follows_the_double_dash_reaches_the_trainer_untouched(cli):
    got = cli("--backend", "toy", "job.yaml", "--greeting", "hi", "-q", "--", "--greeting", "x", "--ray-address", "y")
    assert got == {"spec": "job.yaml", "options": {"greeting": "hi"}, "quiet": True,
                   "trainer_args": ["--greeting", "x", "--ray-address", "y"]}


@pytest.mark.parametrize("args, message", [
    (["--greeting", "hi"], "--greeting: only the toy backend uses it; add --backend toy"),
    (["--backend", "toy", "--ray-address", "h:1"], "--ray-address: only the ray backend uses it; add --backend ray"),
    (["-B", "greeting=hi"], "--backend-opt greeting: only the toy backend uses it; add --backend toy"),
    (["--backend", "toy", "--greting", "hi"], "--greting: no such option; did you mean --greeting?"),
    (["--ray-adress", "h:1"], "--ray-adress: no such option; did you mean --ray-address (a ray backend option)?"),
    (["--quite"], "--quite: no such option; did you mean --quiet?"),
    (["--backend", "toy", "--times", "many"], "--times: Input should be a valid integer"),
    (["--backend", "toy", "--times"], "--times: needs a value (INTEGER)"),
    (["--backend", "toy", "-B", "greeting"], "--backend-opt 'greeting': give KEY=VALUE"),
    (["--backend", "toy", "--greeting", "a", "-B", "greeting=b"], "--greeting: given twice"),
    (["-B", "image=gcr.io/p/t:1"], "--backend-opt image: only the kubernetes, vertex and containers backends use it"),
], ids=["other-backend", "builtin-owner", "backend-opt-owner", "typo", "typo-of-another-backend", "typo-own-option",
        "invalid-value", "missing-value", "bad-pair", "twice", "two-owners"])
def test_a_wrong_flag_is_one_line_naming_the_fix(cli, args, message):
    error = cli("job.yaml", *args)
    assert isinstance(error, UserError) and error.exit_code == 2
    assert str(error).startswith(message) and "\n" not in str(error)


def test_help_lists_every_backends_options_from_its_model():
    from multiworker.cli.backend_opts import options_help

    text = options_help({"--image", "--backend"})
    for backend, line in [("ray", "--ray-address TEXT"), ("ray", "--placement spread|strict_spread|pack"),
                          ("vertex", "--allow-loss"), ("kubernetes", "--watch-timeout INTEGER"),
                          ("toy", "--times INTEGER"), ("toy", "--greeting TEXT")]:
        section = text.split(f"[bold]{backend}[/bold]:")[1].split("\n\n")[0]
        assert line in section, (backend, line, section)
    assert "how often (default 1)" in text
    assert "-B image=TEXT" in text  # named like the command's own --image: given as -B
    assert "--image TEXT" in options_help({"--image"}, frozenset({"image"}))  # run passes its --image on


def test_run_and_tune_help_list_the_backend_options():
    from multiworker.cli import _register_all, app

    _register_all()
    runner = CliRunner()
    for args in (["run", "--help"], ["tune", "run", "--help"]):
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert result.exit_code == 0, result.output
        assert "--ray-address" in result.output and "--greeting" in result.output and "--backend-opt" in result.output


def test_tune_trials_record_the_backend_options(mw_home, project):
    """Every trial's job is created with the options given to `tune`."""
    from multiworker.job import Store
    from multiworker.spec.load import load_spec
    from multiworker.tune.jobs import create_trial_job

    (project / "job.yaml").write_text("name: t\nmodule: trainer.task\npools:\n  worker: {replicas: 1}\n")
    store = Store()
    job_id = create_trial_job(store, load_spec(project / "job.yaml"), backend="toy", trainer_args=["--lr=0.1"],
                              study="s", trial=1, backend_options={"greeting": "hi", "times": 2})
    job = store.get_job(job_id)
    assert job.backend == "toy" and job.backend_options == {"greeting": "hi", "times": 2}
    assert (job.run.study, job.run.trial, job.run.trainer_args) == ("s", 1, ("--lr=0.1",))
