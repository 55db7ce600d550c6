"""The documentation stays true: every `multiworker` command shown in the README, the docs and the
examples' READMEs names a real command with options that command has (test_docs_site.py builds the site).

The commands that can run here are run by the examples' and features' own tests; this test catches
the drift those cannot: a renamed flag, a removed command, a page that lost its link.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import typer

from multiworker.cli.backend_opts import BackendCommand, option_models

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "examples").glob("*/README.md")])
FENCE = re.compile(r"^```(\w*)\s*$")
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}


def _command_lines(page: Path) -> list[tuple[int, str]]:
    """(line number, command) for every `multiworker ...` line in the page's shell blocks."""
    found: list[tuple[int, str]] = []
    lang: str | None = None
    pending = ""
    start = 0
    for number, line in enumerate(page.read_text().splitlines(), 1):
        fence = FENCE.match(line.strip())
        if fence:
            lang = None if lang is not None else fence.group(1)
            continue
        if lang not in SHELL_LANGS or lang is None:
            continue
        text = line.split("  #")[0].split(" # ")[0].rstrip()
        if pending:
            pending += " " + text.strip().rstrip("\\")
        elif re.match(r"^(\.venv/bin/)?multiworker\s", text.strip()):
            pending, start = text.strip().rstrip("\\"), number
        else:
            continue
        if not text.endswith("\\"):
            found.append((start, pending))
            pending = ""
    return found


def _alternatives(command: str) -> list[str]:
    """`multiworker status JOB / watch JOB` and `cancel JOB | delete JOB` list several commands."""
    parts = re.split(r"\s+[/|]\s+", command)
    out = [parts[0]]
    for part in parts[1:]:
        out.append(part if part.startswith("multiworker") else "multiworker " + part)
    return out


def _root():
    from multiworker.cli import _register_all, app

    _register_all()
    return typer.main.get_command(app)


def _check(root, command: str) -> str | None:
    tokens = [t.strip("[]") for t in shlex.split(command)][1:]
    cmd, path = root, ["multiworker"]
    while hasattr(cmd, "commands") and tokens and not tokens[0].startswith("-"):
        sub = cmd.commands.get(tokens[0])
        if sub is None and len(path) > 1 and "run" in cmd.commands and isinstance(cmd.commands["run"], BackendCommand):
            sub, tokens = cmd.commands["run"], ["run", *tokens]  # `tune SPEC` is `tune run SPEC`
        if sub is None:
            return f"`{' '.join(path)} {tokens[0]}`: no such command"
        cmd, path = sub, [*path, tokens.pop(0)]
    if cmd.context_settings.get("ignore_unknown_options") or cmd.context_settings.get("allow_extra_args"):
        return None  # a pass-through command (gcloud lines): its flags are checked by its own tests
    known = {opt for param in cmd.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
    if isinstance(cmd, BackendCommand):  # each backend's flags come from its options model
        for model in option_models().values():
            known |= {f"--{prefix}{key.replace('_', '-')}" for key in model.model_fields for prefix in ("", "no-")}
    for token in tokens:
        if token == "--":
            break
        if token.startswith("-") and len(token) > 1 and not re.match(r"^-\d", token):
            name = token.split("=", 1)[0]
            if name not in known:
                return f"`{' '.join(path)}` has no option {name}"
    return None


def test_every_documented_command_exists_with_its_options():
    root = _root()
    problems = []
    seen = 0
    for page in PAGES:
        for number, line in _command_lines(page):
            for command in _alternatives(line):
                seen += 1
                problem = _check(root, command)
                if problem:
                    problems.append(f"{page.relative_to(ROOT)}:{number}: {problem}")
    assert seen > 40, f"only {seen} documented commands found: the extractor lost them"
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_wrong_flag_and_a_wrong_command():
    root = _root()
    assert _check(root, "multiworker run job.yaml --no-such-flag") is not None
    assert _check(root, "multiworker frobnicate job.yaml") is not None
    assert _check(root, "multiworker run job.yaml --set a=1 -- --anything") is None
    assert _check(root, "multiworker run job.yaml --backend ray --ray-address A:1") is None
    assert _check(root, "multiworker tune job.yaml --config c.yaml --no-such-flag") is not None


def test_the_readme_links_every_guide_page():
    readme = (ROOT / "README.md").read_text()
    pages = {p.name for p in (ROOT / "docs").glob("*.md")} - {"index.md"}
    missing = sorted(p for p in pages if f"docs/{p}" not in readme)
    assert not missing, f"README.md's table does not link: {missing}"
