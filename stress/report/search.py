"""The report of a capacity search: capacity.md and capacity.html beside capacity.json.

Built from capacity.json alone (the search's record; each pass's own run directory keeps
its own report), so ``stress report SEARCH_DIR`` rebuilds it and a search stopped early
still has one. The answer comes first, then the capacity map (a grid search), then every
step with each pass's SLO figures and links to the passes' reports.

A search that did not finish (``state``: running, interrupted, server lost, killed,
failed) has no answer: the report says how it ended and what the steps it judged showed,
never more. A ``running`` search whose process is gone was killed; the rebuild says so.
"""

from __future__ import annotations

import os
import socket
from html import escape
from pathlib import Path
from typing import Any

from stress.core.fmt import times, tokens
from stress.core.secrets import REDACTOR
from stress.report.model import Table
from stress.report.render_html import CSS, table_html
from stress.report.render_md import table_md

MAP_CSS = (
    "td.MET{background:#eefbea}td.MISSED{background:#fdeceb}td.NOT{background:#fff8e6}"
    "td.empty{color:#aaa;text-align:center}td.INTERRUPTED,td.SERVER{background:#eeeeee}"
)

STATE_TEXT = {
    "running": "the search is still running",
    "interrupted": "the search was interrupted",
    "server lost": "the server stopped answering",
    "killed": "the search was killed before it finished (its process is gone)",
    "failed": "the search stopped on an error",
}
"""How a search that did not finish ended, as its report says it."""


def settle(doc: dict[str, Any], state: str, why: str = "") -> dict[str, Any]:
    """``doc`` with its ``state``; a search that did not finish loses its answer: the
    answer says how it ended and what its judged steps showed, nothing past them."""
    doc["state"] = state
    if state == "finished":
        doc["state_text"] = "finished"
        return doc
    steps = len(doc.get("steps") or [])
    doc["state_text"] = STATE_TEXT.get(state, state) + (f": {why}" if why else "")
    ended = f"{STATE_TEXT.get(state, state)} after {steps} step{'' if steps == 1 else 's'}"
    doc["answer"] = f"no answer: {ended}; judged so far: {judged(doc, doc.get('bracket'))}"
    for name, tier in (doc.get("tiers") or {}).items():
        tier["answer"] = f"no answer ({judged(doc, tier.get('bracket'))})"
        tier["answer_line"] = f"SLO tier {name} ({tier.get('criterion')}): {tier['answer']}"
    head = f"capacity at SLO ({doc.get('criterion')}): "
    if doc.get("axis") == "grid":
        _settle_rows(doc, ended)
    else:
        doc["answer_line"] = head + doc["answer"]
    return doc


def _settle_rows(doc: dict[str, Any], ended: str) -> None:
    """A grid that did not finish: each row whose search (or SLO tier's) did not stop
    loses its answer, and the answer lines, the SLO's and each tier's, say how it ended
    over the rows' answers (the rows that finished keep theirs)."""
    parts: list[str] = []
    by_tier: dict[str, list[str]] = {name: [] for name in doc.get("tiers") or {}}
    for row in doc.get("rows") or []:
        at = f"{tokens(row.get('length') or 0)} tokens"
        if row.get("stop") is None:
            row["answer"] = f"no answer ({judged(doc, row.get('bracket'))})"
        parts.append(f"{at}: {row['answer']}")
        for name, tier in (row.get("tiers") or {}).items():
            if tier.get("stop") is None:
                tier["answer"] = f"no answer ({judged(doc, tier.get('bracket'))})"
                tier["answer_line"] = (
                    f"{at} of history: SLO tier {name} ({tier.get('criterion')}): {tier['answer']}"
                )
            by_tier.setdefault(name, []).append(f"{at}: {tier['answer']}")
    head = f"capacity map at SLO ({doc.get('criterion')}), {ended}, by tokens of history: "
    doc["answer_line"] = head + "; ".join(parts)
    for name, tier in (doc.get("tiers") or {}).items():
        head = f"capacity map at SLO tier {name} ({tier.get('criterion')}), {ended}, by tokens "
        tier["answer_line"] = head + "of history: " + "; ".join(by_tier[name])


def judged(doc: dict[str, Any], bracket: Any) -> str:
    """What the judged steps showed: 'MET at 4 users, MISSED at 8 users'."""
    lo, hi = bracket if isinstance(bracket, list) and len(bracket) == 2 else (None, None)
    if lo is not None and hi is not None:
        return f"MET at {_value(doc, lo)}, MISSED at {_value(doc, hi)}"
    if lo is not None:
        return f"MET up to {_value(doc, lo)}, nothing above it judged"
    if hi is not None:
        return f"MISSED at {_value(doc, hi)}, nothing below it judged"
    return "no step judged"


def rebuilt(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as ``stress report`` rebuilds it: a search that never finished and whose
    process is gone was killed. A record without ``state`` (an older stress) finished
    when its search stopped (every row's, for a grid)."""
    state = doc.get("state")
    if state is None:
        rows = doc.get("rows") or [doc]
        state = "finished" if all(r.get("stop") for r in rows) else "running"
    if state == "running" and not _alive(doc):
        where = doc.get("in_flight")
        return settle(doc, "killed", f"during the pass at {where}" if where else "")
    return doc if doc.get("state") else settle(doc, state)


def _alive(doc: dict[str, Any]) -> bool:
    """The search's process still runs: same host, its pid there, running stress."""
    pid = doc.get("pid")
    if not isinstance(pid, int) or doc.get("host") != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    try:
        return b"capacity" in cmdline.read_bytes() if cmdline.exists() else True
    except OSError:
        return True


def _value(doc: dict[str, Any], v: int) -> str:
    if doc.get("unit") == "tokens":
        return f"{tokens(v)} tokens"
    return f"{v} user{'' if v == 1 else 's'}"


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
    """The capacity map: a row per history length, a cell per user count tried, then the
    row's capacity at the SLO and at each SLO tier (a column a tier)."""
    grid = doc.get("map")
    if not grid:
        return None
    names = list(doc.get("tiers") or {})
    answers = []
    for r in doc.get("rows") or []:
        tiers = r.get("tiers") or {}
        answers.append([str(r.get("answer"))] + [tier_cell(tiers.get(n)) for n in names])
    columns = ["history", *[f"{u} users" for u in grid["users"]], "capacity"]
    columns += [f"tier {n}" for n in names]
    rows = []
    for length, cells, answer in zip(grid["lengths"], grid["cells"], answers, strict=False):
        rows.append([f"{tokens(length or 0)} tokens", *[c or "." for c in cells], *answer])
    note = "Each cell: the step's status and the worst pass's SLO factor (above x1: missed)."
    if names:
        note += " The tier columns: each SLO tier's capacity at that history, from the same passes."
    return Table("Capacity map: users x tokens of history", columns, rows, note, id="map")


def tier_cell(tier: dict[str, Any] | None) -> str:
    """A tier's map cell: its answer at the row, or '.' for a row its search never reached."""
    return str(tier.get("answer")) if tier else "."


def _map_html(t: Table) -> str:
    parts = [f'<h2 id="map">{escape(t.title)}</h2><table class="data map"><thead><tr>']
    parts += [f"<th>{escape(c)}</th>" for c in t.columns]
    parts.append("</tr></thead><tbody>")
    answers = t.columns.index("capacity")  # the map's cells lie between history and it
    for row in t.rows:
        cells = [f"<td>{escape(row[0])}</td>"]
        for c in row[1:answers]:
            cls = "empty" if c == "." else c.split()[0]
            cells.append(f'<td class="{escape(cls)}">{escape(c)}</td>')
        cells += [f"<td>{escape(c)}</td>" for c in row[answers:]]
        parts.append("<tr>" + "".join(cells) + "</tr>")
    parts.append(f"</tbody></table><p class=note>{escape(t.note)}</p>")
    return "".join(parts)


def facts(doc: dict[str, Any]) -> list[str]:
    out = []
    if doc.get("state") not in (None, "finished"):
        out.append(f"Not finished: {doc.get('state_text')}; the steps below are all it ran.")
    out.append(f"Criterion: the scenario's SLO, {doc.get('criterion')}.")
    for name, tier in (doc.get("tiers") or {}).items():  # from the same passes
        head = f"SLO tier {name} ({tier.get('criterion')})"
        if doc.get("axis") == "grid":  # every row's answer for the tier
            out.append(f"{head}, by tokens of history: {_tier_rows(doc, name)}.")
        else:
            out.append(f"{head}: {tier.get('answer')}.")
    if doc.get("stop_text"):
        out.append(f"Stopped: {doc['stop_text']}.")
    if isinstance(b := doc.get("boundary"), dict) and b.get("text"):
        out.append(f"Boundary: {str(b['text'])[0].upper()}{str(b['text'])[1:]}.")
    if doc.get("undecided"):
        out.append(
            "UNDECIDED steps ran up to search.max_repeat passes and their SLO factors still "
            f"held the limit inside their {doc.get('settings', {}).get('confidence', 0.9):g} "
            "interval: the answer is stated only where the steps were decided."
        )
    if doc.get("llamacpp_slots"):
        out.append(
            f"llama.cpp serves {doc['llamacpp_slots']} slots: at most that many requests run "
            "at once (others wait), and no conversation grows past a slot's context."
        )
    settings = doc.get("settings") or {}
    shown = ", ".join(f"{k} {v}" for k, v in settings.items() if v is not None)
    out.append(f"Search settings: {shown}.")
    return out


def _tier_rows(doc: dict[str, Any], name: str) -> str:
    """A grid's answers for SLO tier ``name``: '2,000 tokens: 9 users [9-10]; 8,000 ...'."""
    parts = []
    for row in doc.get("rows") or []:
        if tier := (row.get("tiers") or {}).get(name):
            parts.append(f"{tokens(row.get('length') or 0)} tokens: {tier.get('answer')}")
    return "; ".join(parts)


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
    _replace(md, REDACTOR.text(render_search_md(doc)))
    _replace(html, REDACTOR.text(render_search_html(doc)))
    return md, html


def _replace(path: Path, text: str) -> None:
    """Write whole or not at all: a search killed while writing keeps its last report."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def rebuild_search_report(root: Path, doc: dict[str, Any]) -> tuple[Path, Path]:
    """``stress report SEARCH_DIR``: capacity.md and capacity.html from capacity.json, and
    capacity.json itself when the search turns out to have been killed."""
    from stress.store.recorder import write_json

    state = doc.get("state")
    doc = rebuilt(doc)
    if doc.get("state") != state:
        write_json(root / "capacity.json", doc)
    return write_search_report(root, doc)
