"""report.html: one self-contained file that opens offline in any browser.

No scripts, no fonts, no images from anywhere: styles are inline and each chart is an
inline ``<svg>``. Every piece of run data is HTML-escaped (model names and error texts
come from the server).
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from stress.report.model import Section, Table

if TYPE_CHECKING:
    from stress.report.model import Report

CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;
max-width:1100px;padding:0 1em;color:#1d232a;background:#fff}
h1{font-size:1.5em}h2{border-bottom:1px solid #ddd;padding-bottom:.2em;margin-top:1.8em}
table{border-collapse:collapse;margin:.6em 0 1.2em;font-variant-numeric:tabular-nums}
th,td{border:1px solid #d8dde3;padding:.25em .6em;text-align:right}
th:first-child,td:first-child{text-align:left}th{background:#f3f5f7}
.verdict{padding:.8em 1em;border-radius:6px;border-left:6px solid}
.PASS{background:#eefbea;border-color:#2e9a3a}.WARN{background:#fff8e6;border-color:#d79b00}
.FAIL{background:#fdeceb;border-color:#c62828}.warn{color:#a15c00;font-weight:600}
figure{margin:1em 0}figcaption{color:#555;font-size:.9em}figure svg{max-width:100%;height:auto}
.note{color:#555;font-size:.9em}dl{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em}
dt{font-weight:600}dd{margin:0}.answer{font-size:1.15em;margin:.6em 0}
details{margin:1em 0}details>summary{cursor:pointer;font-weight:600;font-size:1.1em}
"""


def table_html(t: Table, tag: str = "h3") -> str:
    parts = [f'<{tag} id="{escape(t.id or t.title)}">{escape(t.title)}</{tag}>']
    if not t.rows:
        return parts[0] + "<p class=note>(no data)</p>"
    parts.append('<table class="data"><thead><tr>')
    parts += [f"<th>{escape(c)}</th>" for c in t.columns]
    parts.append("</tr></thead><tbody>")
    for row in t.rows:
        parts.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in row) + "</tr>")
    parts.append("</tbody></table>")
    if t.note:
        parts.append(f"<p class=note>{escape(t.note)}</p>")
    return "".join(parts)


def section_html(s: Section) -> str:
    parts = []
    if s.paragraphs:
        parts.append("<ul>" + "".join(f"<li>{escape(p)}</li>" for p in s.paragraphs) + "</ul>")
    for c in s.charts:
        cap = f"<figcaption>{escape(c.caption)}</figcaption>" if c.caption else ""
        parts.append(
            f'<figure class="chart" id="chart-{escape(c.id)}"><h3>{escape(c.title)}</h3>'
            f"{c.svg}{cap}</figure>"
        )
    parts += [table_html(t) for t in s.tables]
    if s.folded:
        return (
            f'<details id="{escape(s.id)}"><summary>{escape(s.title)}</summary>'
            + "".join(parts)
            + "</details>"
        )
    return (
        f'<section id="{escape(s.id)}"><h2>{escape(s.title)}</h2>' + "".join(parts) + "</section>"
    )


def render_html(report: Report) -> str:
    v = report.verdict
    body = [f"<h1>{escape(report.title)}</h1>"]
    body.append(f'<section id="verdict" class="verdict {v.status}">')
    body.append(f"<h2>Verdict: {v.status}</h2><p><strong>{escape(v.summary)}</strong></p>")
    if report.capacity:
        body.append(f'<p class="answer"><strong>Capacity:</strong> {escape(report.capacity)}.</p>')
    body.append("<details><summary>What the verdict looked at</summary><ul>")
    body += [f"<li>{escape(i)}</li>" for i in v.items]
    body.append("</ul></details><ul>")
    body += [f'<li class="warn">WARNING: {escape(w)}</li>' for w in v.warnings]
    body.append("</ul></section>")
    sections = [s for s in report.sections if not s.folded]
    folded = [s for s in report.sections if s.folded]
    body += [section_html(s) for s in sections[:1]]  # the capacity answer, then the headline
    body.append('<section id="headline">' + table_html(report.headline, "h2") + "</section>")
    body += [section_html(s) for s in sections[1:]]
    body += [section_html(s) for s in folded]
    body.append(
        '<details id="definitions"><summary>Definitions</summary><dl>'
        + "".join(f"<dt>{escape(n)}</dt><dd>{escape(d)}</dd>" for n, d in report.definitions)
        + "</dl></details>"
    )
    body.append(
        '<details id="fingerprint-section"><summary>Fingerprint</summary>'
        + table_html(report.fingerprint, "h2")
        + "</details>"
    )
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width,initial-scale=1">'
        f"<title>{escape(report.title)}</title><style>{CSS}</style></head><body>"
        + "\n".join(body)
        + "</body></html>\n"
    )
