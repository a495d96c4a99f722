"""The report of a capacity search: capacity.md and capacity.html beside capacity.json.

Built from capacity.json alone (the search's record; each pass's own run directory keeps
its own report), so ``stress report SEARCH_DIR`` rebuilds it and a search stopped early
still has one. The answer comes first, then the capacity map (a grid search), then every
step with each pass's SLO figures and links to the passes' reports.
"""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

from stress.fmt import times, tokens
from stress.report.model import Table
from stress.report.render_html import CSS, table_html
from stress.report.render_md import table_md
from stress.secrets import REDACTOR

MAP_CSS = (
    "td.MET{background:#eefbea}td.MISSED{background:#fdeceb}td.NOT{background:#fff8e6}"
    "td.empty{color:#aaa;text-align:center}"
)


def _value(doc: dict[str, Any], v: int) -> str:
    return f"{tokens(v)} tokens" if doc.get("unit") == "tokens" else f"{v} users"


def steps_table(doc: dict[str, Any]) -> Table:
    grid = doc.get("axis") == "grid"
    columns = ["#", *(["history"] if grid else []), "step", "status", "SLO factor per pass"]
    columns += ["SLO figures (each pass)", "longest conversation", "limit / why", "passes"]
    rows = []
    for i, s in enumerate(doc.get("steps") or [], 1):
        why = s.get("limit") or ", ".join(dict.fromkeys(s.get("reasons") or []))
        rows.append(
            [
                str(i),
                *([f"{tokens(s.get('length') or 0)} tokens"] if grid else []),
                _value(doc, int(s["value"])),
                str(s.get("status")),
                ", ".join(times(f) for f in s.get("factors") or []),
                " | ".join(s.get("checks") or []),
                f"{tokens(s.get('conversation_tokens') or 0)} tokens",
                why or "-",
                ", ".join(s.get("run_dirs") or []),
            ]
        )
    note = "A step is MET only when every pass met every SLO figure and stayed healthy."
    return Table("Steps, in the order run", columns, rows, note, id="steps")


def map_table(doc: dict[str, Any]) -> Table | None:
    grid = doc.get("map")
    if not grid:
        return None
    answers = [str(r.get("answer")) for r in doc.get("rows") or []]
    columns = ["history", *[f"{u} users" for u in grid["users"]], "capacity"]
    rows = []
    for length, cells, answer in zip(grid["lengths"], grid["cells"], answers, strict=False):
        rows.append([f"{tokens(length or 0)} tokens", *[c or "." for c in cells], answer])
    note = "Each cell: the step's status and the worst pass's SLO factor (above x1: missed)."
    return Table("Capacity map: users x tokens of history", columns, rows, note, id="map")


def _map_html(t: Table) -> str:
    parts = [f'<h2 id="map">{escape(t.title)}</h2><table class="data map"><thead><tr>']
    parts += [f"<th>{escape(c)}</th>" for c in t.columns]
    parts.append("</tr></thead><tbody>")
    for row in t.rows:
        cells = [f"<td>{escape(row[0])}</td>"]
        for c in row[1:-1]:
            cls = "empty" if c == "." else c.split()[0]
            cells.append(f'<td class="{escape(cls)}">{escape(c)}</td>')
        cells.append(f"<td>{escape(row[-1])}</td>")
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append(f"</tbody></table><p class=note>{escape(t.note)}</p>")
    return "".join(parts)


def facts(doc: dict[str, Any]) -> list[str]:
    out = [f"Criterion: the scenario's SLO, {doc.get('criterion')}."]
    if doc.get("stop_text"):
        out.append(f"Stopped: {doc['stop_text']}.")
    if doc.get("llamacpp_slots"):
        out.append(
            f"llama.cpp serves {doc['llamacpp_slots']} slots: at most that many requests run "
            "at once (others wait), and no conversation grows past a slot's context."
        )
    settings = doc.get("settings") or {}
    shown = ", ".join(f"{k} {v}" for k, v in settings.items() if v is not None)
    out.append(f"Search settings: {shown}.")
    return out


def render_search_md(doc: dict[str, Any]) -> str:
    out = [f"# stress capacity: {doc.get('scenario', '')}", "", f"**{doc.get('answer_line')}**", ""]
    out += [f"- {f}" for f in facts(doc)] + [""]
    m = map_table(doc)
    if m is not None:
        out += table_md(m, "##")
    out += table_md(steps_table(doc), "##")
    return "\n".join(out).rstrip() + "\n"


def render_search_html(doc: dict[str, Any]) -> str:
    title = f"stress capacity: {doc.get('scenario', '')}"
    body = [f"<h1>{escape(title)}</h1>"]
    body.append(f'<p class="answer"><strong>{escape(str(doc.get("answer_line")))}</strong></p>')
    body.append("<ul>" + "".join(f"<li>{escape(f)}</li>" for f in facts(doc)) + "</ul>")
    m = map_table(doc)
    if m is not None:
        body.append(_map_html(m))
    steps = table_html(steps_table(doc), "h2")
    for s in doc.get("steps") or []:  # each pass's own report, one click away
        for run in s.get("run_dirs") or []:
            link = f'<a href="{escape(run)}/report.html">{escape(run)}</a>'
            steps = steps.replace(escape(run), link, 1)
    body.append(steps)
    return (
        f"<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>{escape(title)}"
        f"</title><style>{CSS}{MAP_CSS}</style></head><body>" + "".join(body) + "</body></html>\n"
    )


def write_search_report(root: Path, doc: dict[str, Any]) -> tuple[Path, Path]:
    """Write capacity.md and capacity.html into the search directory ``root``."""
    md, html = root / "capacity.md", root / "capacity.html"
    md.write_text(REDACTOR.text(render_search_md(doc)), encoding="utf-8")
    html.write_text(REDACTOR.text(render_search_html(doc)), encoding="utf-8")
    return md, html
