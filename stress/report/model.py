"""The report as plain data: what both renderers (Markdown, HTML) and the terminal show.

Builders produce these objects; renderers only lay them out. Cells are already formatted
strings so the two renderers cannot disagree about a number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from stress.analysis.judge import Verdict

SORT_KEYS = ("date", "scenario", "ttft_p95", "tok_s", "hit_rate", "duration")
"""``stress ls --sort``: the archive's sort keys."""


@dataclass(slots=True)
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    id: str = ""


@dataclass(slots=True)
class Chart:
    id: str
    title: str
    svg: str
    caption: str = ""


@dataclass(slots=True)
class Section:
    id: str
    title: str
    paragraphs: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    folded: bool = False
    """Detail a reader opens on demand (HTML: a closed <details>; Markdown: at the end)."""


@dataclass(slots=True)
class Report:
    run_id: str
    scenario: str
    verdict: Verdict
    headline: Table
    definitions: list[tuple[str, str]]
    sections: list[Section]
    fingerprint: Table
    charts: list[Chart] = field(default_factory=list)
    capacity: str = ""
    """The capacity answer's sentence (``stress.analysis.capacity``)."""

    @property
    def title(self) -> str:
        return f"stress report: {self.scenario} ({self.run_id})"
