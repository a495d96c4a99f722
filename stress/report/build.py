"""Assemble a report from a run directory and write report.md and report.html.

The order is the reader's: the verdict, the capacity answer with its chart and buckets,
the headline figures, inter-token latency, the charts and the GPUs; then, folded, the
per-user, per-round and phase tables, the definitions and the fingerprint that says what
was measured. Every figure comes from the run's one analysis (``stress.analysis.analyze``).
"""

from __future__ import annotations

from pathlib import Path

from stress.analysis import figures
from stress.analysis.analyze import Analysis, analyze
from stress.analysis.rundata import RunData
from stress.core.fmt import num, pct
from stress.report.capacity import capacity_section
from stress.report.fingerprint import fingerprint
from stress.report.headline import DEFINITIONS, headline_table
from stress.report.itl import itl_section, per_user_table
from stress.report.load import load_section
from stress.report.model import Report, Section, Table
from stress.report.series import SIMULATED_NOTE, gpu_series, simulated_gpus, total_energy_j
from stress.report.tables import per_phase, per_round, per_user

CHART_DIR = "report-charts"
"""Beside report.md: the charts as SVG files (report.html carries them inline)."""


def gpu_table(run: RunData) -> Table | None:
    """Per card, named as everywhere (``card_label``): power, temperature, clock, the
    share of samples throttled and by which reasons, and whether the card sat idle while
    the others worked (the GPU collector's flag, carried from the run)."""
    cards = gpu_series(run)
    if not cards:
        return None
    collected = {
        str(c.get("key")): c
        for c in (run.collector("gpu").get("cards") or [])
        if isinstance(c, dict)
    }
    rows = []
    for c in cards:
        n = len(c.throttled)
        reasons = ", ".join(f"{k} {pct(v / n)}" for k, v in c.throttle_reasons.most_common() if n)
        info = collected.get(c.key) or {}
        idle_s = info.get("idle_while_others_work_s")
        if info.get("flagged_idle"):
            idle = f"yes, {num(float(idle_s or 0.0))} s"
        elif info:
            idle = "no"
        else:
            idle = "-"  # a run killed before the collector's summary
        rows.append(
            [
                c.label,
                str(len(c.t)),
                num(figures.sample_mean(c.power_w)),
                num(figures.sample_peak(c.power_w)),
                num(c.power_limit_w),
                num(figures.sample_peak(c.temp_c)),
                num(figures.sample_mean(c.sm_mhz)),
                pct(sum(c.throttled) / n if n else None),
                reasons or "none",
                idle,
            ]
        )
    energy = total_energy_j(run)
    out_tokens = figures.energy_tokens(run.requests)
    jpt = figures.j_per_token(energy, out_tokens)
    servers = run.server_cards
    note = "Energy " + ("-" if energy is None else f"{energy / 3600:,.1f} Wh") + " over the run"
    if servers and len(servers) < len(cards):
        note += f" on the server's {len(servers)} of {len(cards)} cards"
    if jpt is not None:
        note += f"; {jpt:.3g} J per output token ({out_tokens:,} tokens)"
    sim = simulated_gpus(run)
    if sim:
        note = f"{SIMULATED_NOTE} {note}"
    return Table(
        "GPUs (simulated)" if sim else "GPUs",
        [
            "card",
            "samples",
            "power mean W",
            "power max W",
            "limit W",
            "temp max °C",
            "SM clock mean MHz",
            "throttled",
            "throttle reasons (share of samples)",
            "idle while others work",
        ],
        rows,
        note=note + ".",
        id="gpus",
    )


def make_report(run_dir: Path, charts: bool = True, analysis: Analysis | None = None) -> Report:
    """Build the report from the run's analysis (``analyze``d here unless given; nothing
    is written). The reader's order: verdict, the capacity answer and its chart, the
    headline, the charts; per-user, per-round and phase tables, the GPU table,
    definitions and fingerprint folded at the end."""
    from stress.report import charts as charts_mod

    analysis = analysis or analyze(run_dir)
    run = analysis.run
    tables = [per_user(run), per_round(run)]
    phase = per_phase(run)
    if phase is not None:
        tables.append(phase)
    itl_users = per_user_table(analysis.tokens)
    if itl_users is not None:
        tables.insert(1, itl_users)
    gt = gpu_table(run)
    chart_list = charts_mod.all_charts(run) if charts else []
    capacity = capacity_section(analysis, charts_mod.seconds(run), charts=charts)
    load = load_section(analysis.load)
    sections = [
        capacity,
        *([load] if load is not None else []),
        itl_section(analysis.tokens, analysis.pauses),
        Section("charts", "Charts", charts=chart_list),
        *([Section("gpus", gt.title, tables=[gt])] if gt is not None else []),
        Section("tables", "Per user, per round, phases", tables=tables, folded=True),
    ]
    fp = fingerprint(run)
    fp_table = Table(
        "Fingerprint", ["what", "value"], [[k, v] for k, v in fp.items()], id="fingerprint"
    )
    return Report(
        run_id=run.run_id,
        scenario=run.scenario_name,
        verdict=analysis.verdict,
        headline=headline_table(run),
        definitions=list(DEFINITIONS),
        sections=sections,
        fingerprint=fp_table,
        charts=capacity.charts + chart_list,
        capacity=analysis.capacity.sentence,
    )


def build_report(run_dir: Path, analysis: Analysis | None = None) -> tuple[Report, Path, Path]:
    """Build the report and write ``report.md`` and ``report.html`` into the run dir."""
    from stress.core.secrets import REDACTOR
    from stress.report.render_html import render_html
    from stress.report.render_md import render_md

    report = make_report(run_dir, analysis=analysis)
    md_path = run_dir / "report.md"
    html_path = run_dir / "report.html"
    chart_dir = run_dir / CHART_DIR
    if report.charts:
        chart_dir.mkdir(exist_ok=True)
        for c in report.charts:
            (chart_dir / f"{c.id}.svg").write_text(c.svg, encoding="utf-8")
    md_path.write_text(REDACTOR.text(render_md(report, CHART_DIR)), encoding="utf-8")
    html_path.write_text(REDACTOR.text(render_html(report)), encoding="utf-8")
    return report, md_path, html_path


def terminal_headline(report: Report) -> str:
    """The verdict and headline table for the terminal."""
    lines = [report.verdict.summary]
    if report.capacity:
        lines.append(f"capacity: {report.capacity}")
    lines += ["  " + i for i in report.verdict.items]
    lines += [f"  WARNING: {w}" for w in report.verdict.warnings]
    t = report.headline
    widths = [max(len(r[i]) for r in [t.columns, *t.rows]) for i in range(len(t.columns))]
    lines.append("")
    for row in [t.columns, *t.rows]:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            )
        )
    return "\n".join(lines)
