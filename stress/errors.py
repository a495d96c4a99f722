"""One place for the errors a user can see.

Hierarchy::

    StressError              anything we report as one clear line, never a traceback
    ├── ScenarioError        a scenario file is wrong (file, line, field, fix)
    ├── SecretError          an API key could not be read from where the user pointed
    ├── TargetError          the server under test cannot be used (unreachable, no model)
    └── RunDirError          a run directory is missing or unreadable

Request failures during a run are *not* exceptions: they end up as records with an
``error_class`` (see ``stress.record``).
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
