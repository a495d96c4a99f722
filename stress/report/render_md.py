"""report.md: the report as Markdown, for a terminal, a git repo or an issue comment.

Charts are linked as SVG files written beside it (report.html carries them inline).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stress.report.model import Section, Table

if TYPE_CHECKING:
    from stress.report.model import Report


def _cell(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def table_md(t: Table, level: str = "###") -> list[str]:
    out = [f"{level} {t.title}", ""]
    if not t.rows:
        return [*out, "(no data)", ""]
    out.append("| " + " | ".join(_cell(c) for c in t.columns) + " |")
    out.append("|" + "|".join("---" if i == 0 else "---:" for i in range(len(t.columns))) + "|")
    out += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    if t.note:
        out += ["", f"_{t.note}_"]
    return [*out, ""]


def render_md(report: Report, chart_dir: str | None = None) -> str:
    v = report.verdict
    out = [f"# {report.title}", "", f"## Verdict: {v.status}", "", f"**{v.summary}**", ""]
    if report.capacity:
        out += [f"**Capacity:** {report.capacity}.", ""]
    out += [f"- {item}" for item in v.items]
    out += [f"- **WARNING:** {w}" for w in v.warnings]
    out.append("")
    sections = [s for s in report.sections if not s.folded]
    folded = [s for s in report.sections if s.folded]
    for s in sections[:1]:  # the capacity answer comes before the headline table
        out += section_md(s, chart_dir)
    out += table_md(report.headline, "##")
    for s in sections[1:] + folded:
        out += section_md(s, chart_dir)
    out += ["## Definitions", ""]
    out += [f"- **{name}**: {text}" for name, text in report.definitions]
    out.append("")
    out += table_md(report.fingerprint, "##")
    return "\n".join(out).rstrip() + "\n"


def section_md(s: Section, chart_dir: str | None) -> list[str]:
    out = [f"## {s.title}", ""]
    for p in s.paragraphs:
        out += [f"- {p}"]
    if s.paragraphs:
        out.append("")
    for c in s.charts:
        out.append(f"### {c.title}")
        out.append("")
        if chart_dir:
            out.append(f"![{c.title}]({chart_dir}/{c.id}.svg)")
        if c.caption:
            out += ["", f"_{c.caption}_"]
        out.append("")
    for t in s.tables:
        out += table_md(t)
    return out
