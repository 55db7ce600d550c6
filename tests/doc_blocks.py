"""The shell commands the documentation shows: every line of a ```sh / ```bash / ```console block
in docs/*.md, continuation lines joined and comments dropped, so a test can run the ones that
run here and the docs stay true."""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path

__all__ = ["Command", "shell_commands"]

_FENCE = re.compile(r"^```(sh|bash|shell|console)\s*$")


@dataclasses.dataclass(frozen=True)
class Command:
    page: str
    line: int
    text: str

    @property
    def argv(self) -> list[str]:
        return shlex.split(self.text)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def _strip_comment(line: str) -> str:
    """The line without a trailing `# comment` (a # inside quotes stays)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=False)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        words = list(lexer)
    except ValueError:  # an unclosed quote: leave the line as written
        return line.strip()
    return " ".join(shlex.quote(w) for w in words)


def shell_commands(docs: Path) -> list[Command]:
    """Every command in the shell blocks of the pages under ``docs``, in page order."""
    found: list[Command] = []
    for page in sorted(docs.rglob("*.md")):
        inside, pending, start = False, "", 0
        for number, raw in enumerate(page.read_text().splitlines(), 1):
            if not inside:
                inside = bool(_FENCE.match(raw.strip()))
                continue
            if raw.strip().startswith("```"):
                inside = False
                continue
            line = raw[2:] if raw.startswith("$ ") else raw
            if not pending:
                start = number
            if line.rstrip().endswith("\\"):
                pending += line.rstrip()[:-1] + " "
                continue
            text = _strip_comment(pending + line)
            pending = ""
            if text:
                found.append(Command(str(page.relative_to(docs)), start, text))
    return found
