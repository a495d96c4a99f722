"""One place for the errors a user can see.

Hierarchy::

    StressError              anything we report as one clear line, never a traceback
    ├── ScenarioError        a scenario file is wrong (file, line, field, fix)      exit 2
    │   └── CorpusError      its corpus is missing, empty or outside the allowed roots
    ├── SecretError          an API key could not be read from where the user pointed  1
    ├── TargetError          the server under test cannot be used (unreachable, no model) 1
    ├── RunDirError          a run directory is missing, unreadable or damaged          1
    │   └── RecordingError   the run could not write its files (full disk): it stopped
    └── Interrupted          a preparation step stopped for Ctrl-C (the run stops too)

Request failures during a run are *not* exceptions: they end up as records with an
``error_class`` (see ``stress.core.record``).
"""

from __future__ import annotations

from dataclasses import dataclass


class StressError(Exception):
    """Base class: ``str(err)`` is the single line shown to the user."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One problem in a scenario file, rendered as ``file:line: field: message (fix)``."""

    file: str
    line: int | None
    field: str
    message: str
    fix: str = ""

    def render(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        text = f"{where}: {self.field or '(file)'}: {self.message}"
        return f"{text} -- fix: {self.fix}" if self.fix else text


class ScenarioError(StressError):
    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        super().__init__("\n".join(p.render() for p in problems))


class SecretError(StressError):
    pass


class TargetError(StressError):
    pass


class RunDirError(StressError):
    pass


class RecordingError(RunDirError):
    """The run directory stopped taking writes (a full disk): the run stopped early."""


class CorpusError(ScenarioError):
    """A paste corpus cannot be used (outside the allowed folders, empty, unreadable).

    A ``ScenarioError`` (exit 2, bad input): ``stress validate`` catches it with the
    scenario's file and line; at run time it names the corpus path itself.
    """

    def __init__(self, path: str, message: str, fix: str) -> None:
        self.path, self.message, self.fix = path, message, fix
        super().__init__([Problem(path, None, "conversation.turn.paste.corpus", message, fix)])


class Interrupted(StressError):
    """A long preparation step (reading a trace, encoding a corpus) saw that its caller
    had stopped (Ctrl-C) and stopped too; the caller, not this error, says so."""
