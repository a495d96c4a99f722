"""``stress compare``: headline figures of several runs side by side, with the noise.

Field note 6: spread between identical runs reached 18 %, and a "flag" that won 136 vs 162
tok/s was one weak run. So every figure is mean ± spread with n, every difference comes
with an interval and a plain judgement (significant / within noise / too few to judge),
and the fingerprints are diffed to show what actually changed (field note 8).

Runs with the same fingerprint (same scenario, versions, server config, GPUs) are repeats
and are pooled into one group. When every run given shares one fingerprint, they are
compared run by run instead: that shows the run-to-run noise itself.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stress.analysis import figures
from stress.analysis.analyze import Analysis, analyze
from stress.analysis.loghist import LogHistogram
from stress.analysis.rundata import RunData
from stress.analysis.stats import (
    BOOTSTRAP_RESAMPLES,
    MIN_CLUSTERS,
    Difference,
    bootstrap_mean_diff,
    bootstrap_ratio_diff,
    describe,
    welch,
)
from stress.core.fmt import num, pct
from stress.report.archive import slo_cell, tier_cell, within_cell
from stress.report.fingerprint import diff, fingerprint, group_key, server_unchanged
from stress.report.headline import PER_REQUEST, aggregate_tok_s, values
from stress.report.model import Table


@dataclass(slots=True)
class Group:
    label: str
    runs: list[RunData]
    fingerprint: dict[str, str]


@dataclass(slots=True)
class Comparison:
    groups: list[Group]
    figures: Table
    verdicts: Table
    """Each run's verdict, SLO grades and capacity answer, as ``stress ls`` shows them."""
    fingerprints: Table
    notes: list[str]
    method: str


def make_groups(runs: list[RunData]) -> tuple[list[Group], str]:
    fps = [fingerprint(r) for r in runs]
    order: list[tuple[tuple[str, str], ...]] = []
    by_key: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for i, fp in enumerate(fps):
        k = group_key({k: v for k, v in fp.items() if k != "host"})
        if k not in by_key:
            order.append(k)
        by_key.setdefault(k, []).append(i)
    if len(order) == 1 and len(runs) > 1:
        note = (
            "All runs share one fingerprint (repeats of one configuration): compared run "
            "by run, so the differences below are run-to-run noise."
        )
        return [Group(chr(65 + i), [r], fps[i]) for i, r in enumerate(runs)], note
    groups = [
        Group(chr(65 + n), [runs[i] for i in by_key[k]], fps[by_key[k][0]])
        for n, k in enumerate(order)
    ]
    pooled = [g for g in groups if len(g.runs) > 1]
    note = (
        "Repeated runs pooled: " + "; ".join(f"{g.label} = {len(g.runs)} runs" for g in pooled)
        if pooled
        else ""
    )
    return groups, note


def _judge(d: Difference) -> str:
    if d.significant is None:
        return "too few to judge"
    return "significant" if d.significant else "within noise"


def _diff_cell(d: Difference, as_pct: bool = False) -> str:
    f = pct if as_pct else num
    if d.diff is None:
        return "-"
    if d.low is None or d.high is None:
        return f"{'+' if d.diff >= 0 else ''}{f(d.diff)}"
    return f"{'+' if d.diff >= 0 else ''}{f(d.diff)} [{f(d.low)}, {f(d.high)}]"


METHOD = (
    f"Per-request figures: percentile bootstrap 95% CI of the difference of means "
    f"({BOOTSTRAP_RESAMPLES} resamples, fixed seed), requests pooled over a group's runs. "
    "A user's requests are correlated (one conversation, one cache) and users of one run "
    f"share the server, so when both sides have {MIN_CLUSTERS} or more users (counted per "
    "run) the resamples are clusters: a group of repeated runs draws its runs with "
    "replacement, then within each drawn run its users with replacement, each with all "
    "its requests (per run, then user); a group of one run draws its users (per user); "
    "with fewer users, requests (per request). The hit rate is a ratio of sums, "
    "bootstrapped the same way. One run's interval cannot see run-to-run noise, so it is "
    "optimistic: prefer repeated runs, judged over runs with Welch's t-test (95%) first, "
    "as are run-level figures and ITL p95 over every gap (one figure per run; a group's "
    "cell pools its runs' gaps). A difference is 'significant' when its interval excludes "
    "zero."
)
"""How the headline table's intervals and judgements are worked out, printed under it."""


def compare(run_dirs: list[Path]) -> Comparison:
    """Analyse each run, group the repeats, and set their headline figures, verdicts and
    fingerprint differences side by side (the first group is the base of every diff)."""
    analyses = [analyze(p) for p in run_dirs]
    groups, group_note = make_groups([a.run for a in analyses])
    changed = diff([g.fingerprint for g in groups])
    return Comparison(
        groups,
        Table("Headline figures", _columns(groups), _figure_rows(groups, analyses), id="compare"),
        _verdicts(groups, analyses),
        _fingerprints(groups, changed),
        _notes(groups, group_note, changed),
        METHOD,
    )


def _columns(groups: list[Group]) -> list[str]:
    """Each group's mean ± sd, then for each other group its difference from the base."""
    base = groups[0]
    columns = ["figure"] + [f"{g.label} (mean ± sd, n)" for g in groups]
    for g in groups[1:]:
        columns += [f"{g.label} − {base.label} [95% CI]", f"{g.label} vs {base.label}"]
    return columns


def _figure_rows(groups: list[Group], analyses: list[Analysis]) -> list[list[str]]:
    """The headline table's rows: per-request figures, ITL, the hit rate, per-run figures."""
    rows = [_per_request_row(groups, key, label, unit) for key, label, unit in PER_REQUEST]
    rows += itl_rows(groups, {id(a.run): a for a in analyses})
    rows.append(_cache_row(groups))
    for label, fn in (
        ("aggregate output tok/s (per run)", aggregate_tok_s),
        ("server hit rate (per run)", _server_hit),
    ):
        rows.append(_per_run_row(groups, label, fn))
    return rows


def _pooled(g: Group, key: str) -> list[float]:
    """A per-request figure over every run of a group, its requests pooled."""
    return [v for r in g.runs for v in values(r.main, key)]


def _pooled_users(g: Group, key: str) -> list[tuple[int, Any]]:
    """Each ``_pooled`` value's (run, user): the units its interval resamples (one user's
    requests share a conversation and a cache; a group's runs are drawn first, then users
    within them, since users of one run share the server)."""
    return [(i, u) for i, r in enumerate(g.runs) for u in figures.generated_users(r.main, key)]


def _per_request_row(groups: list[Group], key: str, label: str, unit: str) -> list[str]:
    """One per-request figure: bootstrap over the pooled requests (per run, then user for
    repeated runs), and Welch over the runs' means when both groups are repeated runs."""
    base = groups[0]
    row = [f"{label} ({unit})"]
    for g in groups:
        d = describe(_pooled(g, key))
        row.append(f"{num(d.mean)} ± {num(d.sd)} (n={d.n})" if d.n else "-")
    for g in groups[1:]:
        dd = bootstrap_mean_diff(
            _pooled(base, key),
            _pooled(g, key),
            clusters_a=_pooled_users(base, key),
            clusters_b=_pooled_users(g, key),
        )
        judge = _judge(dd)
        if len(base.runs) > 1 and len(g.runs) > 1:
            # repeated runs are the honest units: their judgement leads
            w = welch(
                [m for r in base.runs if (m := describe(values(r.main, key)).mean) is not None],
                [m for r in g.runs if (m := describe(values(r.main, key)).mean) is not None],
            )
            judge = f"over runs (Welch): {_judge(w)}; {dd.unit}: {judge}"
        row += [_diff_cell(dd), judge]
    return row


def _cache_pairs(g: Group) -> tuple[list[float], list[float], list[tuple[int, Any]]]:
    """Every request's (cached, prompt) tokens over a group's runs, as two lists, and each
    pair's (run, user)."""
    c: list[float] = []
    p: list[float] = []
    users: list[tuple[int, Any]] = []
    for i, r in enumerate(g.runs):
        a, b = figures.cache_pairs(r.main)
        c += a
        p += b
        users += [(i, u) for u in figures.cache_pair_users(r.main)]
    return c, p, users


def _cache_row(groups: list[Group]) -> list[str]:
    """The prefix-cache hit rate: a ratio of sums per group, its difference bootstrapped."""
    row = ["prefix-cache hit (cached / prompt)"]
    for g in groups:
        pooled = [rec for r in g.runs for rec in r.main]
        share = figures.cached_share(pooled)
        n = len(figures.cache_pairs(pooled)[1])
        row.append(f"{pct(share)} (n={n})" if share is not None else "-")
    for g in groups[1:]:
        (ca, pa, ua), (cb, pb, ub) = _cache_pairs(groups[0]), _cache_pairs(g)
        dd = bootstrap_ratio_diff(ca, pa, cb, pb, clusters_a=ua, clusters_b=ub)
        row += [_diff_cell(dd, as_pct=True), _judge(dd)]
    return row


def _per_run_row(
    groups: list[Group], label: str, fn: Callable[[RunData], float | None]
) -> list[str]:
    """A figure with one value per run, judged over runs (Welch; 2+ runs per group)."""
    per_group = [[v for r in g.runs if (v := fn(r)) is not None] for g in groups]
    row = [label]
    for vals in per_group:
        d = describe(vals)
        row.append(f"{num(d.mean)} ± {num(d.sd)} (runs={d.n})" if d.n else "-")
    for vals in per_group[1:]:
        w = welch(per_group[0], vals)
        judge = _judge(w)
        if w.significant is None:
            judge = "too few runs to judge (need 2+ per group)"
        row += [_diff_cell(w), judge]
    return row


def _notes(groups: list[Group], group_note: str, changed: list[tuple[str, list[str]]]) -> list[str]:
    """How the runs were grouped, which runs each group holds, and what the fingerprint
    difference (or its absence) means."""
    notes = [group_note] if group_note else []
    for g in groups:
        notes.append(f"{g.label}: " + ", ".join(r.run_id for r in g.runs))
    if not changed:
        notes.append("The fingerprints are identical: nothing recorded differs between groups.")
    elif server_unchanged(changed):
        notes.append(
            "The scenario changed but nothing the server reports did (version, effective "
            "config, KV pool, model): a changed flag may not have taken effect (field note 8)."
        )
    return notes


def _verdicts(groups: list[Group], analyses: list[Analysis]) -> Table:
    """Each run's verdict, SLO and SLO tier grades and capacity answer, as its own report
    gives them."""
    label_of = {id(r): g.label for g in groups for r in g.runs}
    return Table(
        "Verdicts and capacity, run by run",
        [
            "run",
            "group",
            "verdict",
            "SLO",
            "SLO tiers",
            "within SLO up to",
            "goodput",
            "goodput (TTFT + ITL)",
            "TTFT p95 s",
            "decode p50 tok/s",
        ],
        [
            [
                a.run.run_id,
                label_of[id(a.run)],
                a.verdict.status,
                slo_cell(a.verdict.slo),
                tier_cell(a.verdict.tiers),
                within_cell(a.capacity),
                pct(a.capacity.goodput),
                pct(a.tokens.goodput),
                num(figures.ttft_p95(a.run.requests)),
                num(figures.decode_p50(a.run.requests)),
            ]
            for a in analyses
        ],
        note="The verdict and capacity answer of each run's own report (stress ls shows the "
        "same). SLO tiers: each slo.tiers entry by its worst check (shown, never grading "
        "the verdict). goodput: TTFT and decode speed within the SLO; goodput (TTFT + "
        "ITL): TTFT and the request's ITL p95 within it (slo.itl_p95 set, the run has "
        "tokens.bin).",
        id="verdicts",
    )


def _fingerprints(groups: list[Group], changed: list[tuple[str, list[str]]]) -> Table:
    """What differs between the groups' fingerprints, one row per key."""
    fp_rows = [[k, *vals] for k, vals in changed]
    return Table(
        "Fingerprint differences",
        ["what", *(g.label for g in groups)],
        fp_rows,
        note="" if fp_rows else "none",
        id="fingerprint-diff",
    )


def itl_rows(groups: list[Group], by_run: dict[int, Analysis]) -> list[list[str]]:
    """Inter-token latency (``tokens.bin``): each request's mean ITL, compared like the
    other per-request figures (bootstrap over requests); and ITL p95 over every gap, one
    value per run, judged over runs (Welch). Runs without token timing add nothing."""
    base = groups[0]

    def means(g: Group) -> list[float]:
        return [
            r.mean
            for run in g.runs
            for r in by_run[id(run)].tokens.per_request.values()
            if r.mean is not None
        ]

    def p95s(g: Group) -> list[float]:
        return [
            v
            for run in g.runs
            if (v := by_run[id(run)].tokens.overall.itl.percentile(95)) is not None
        ]

    if not any(means(g) for g in groups):
        return []
    row = ["ITL per request, mean (s)"]
    for g in groups:
        d = describe(means(g))
        row.append(f"{num(d.mean)} ± {num(d.sd)} (n={d.n})" if d.n else "-")
    for g in groups[1:]:
        dd = bootstrap_mean_diff(means(base), means(g))
        row += [_diff_cell(dd), _judge(dd)]
    p95_row = ["ITL p95, every gap (s)"]
    for g in groups:
        pooled = LogHistogram()
        for run in g.runs:
            pooled.merge(by_run[id(run)].tokens.overall.itl)
        p95_row.append(f"{num(pooled.percentile(95))} (gaps={pooled.n:,})" if pooled.n else "-")
    for g in groups[1:]:
        w = welch(p95s(base), p95s(g))
        judge = _judge(w)
        if w.significant is None:
            judge = "too few runs to judge (need 2+ per group)"
        p95_row += [_diff_cell(w), judge]
    return [row, p95_row]


def _server_hit(run: RunData) -> float | None:
    v = run.collector("server").get("hit_rate_run")
    return float(v) if isinstance(v, int | float) else None


def render_compare_md(c: Comparison) -> str:
    from stress.report.render_md import table_md

    out = ["# stress compare", ""]
    out += [f"- {n}" for n in c.notes]
    out += ["", *table_md(c.figures, "##"), f"_Method: {c.method}_", ""]
    out += table_md(c.verdicts, "##")
    out += table_md(c.fingerprints, "##")
    return "\n".join(out).rstrip() + "\n"


def render_compare_html(c: Comparison) -> str:
    from html import escape

    from stress.report.render_html import CSS, table_html

    notes = "".join(f"<li>{escape(n)}</li>" for n in c.notes)
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8><title>stress compare"
        f"</title><style>{CSS}</style></head><body><h1>stress compare</h1><ul>{notes}</ul>"
        + table_html(c.figures, "h2")
        + f"<p class=note>Method: {escape(c.method)}</p>"
        + table_html(c.verdicts, "h2")
        + table_html(c.fingerprints, "h2")
        + "</body></html>\n"
    )
