"""The headline figures over non-warm-up requests, and their published definitions.

One function per figure so that ``report``, ``compare`` and ``ls`` agree exactly. Latency
and speed figures count requests that generated text (``ok`` and ``reasoning_only``): a
failed request has no TTFT. Only ``ok`` counts as *answered*: a reply that reasoned and
stopped without answer text measured the server's speed but answered nothing. Aggregate
output throughput is a run-level figure; its spread is taken over equal time windows of
the run.
"""

from __future__ import annotations

import numpy as np

from stress.analysis import figures
from stress.analysis.rundata import Record, RunData
from stress.analysis.stats import Describe, describe
from stress.core.fmt import mean_sd, num
from stress.report.model import Table

#: (record field, label, unit)
PER_REQUEST: tuple[tuple[str, str, str], ...] = (
    ("ttft_s", "TTFT", "s"),
    ("ttfc_s", "TTFC", "s"),
    ("decode_tok_s", "decode", "tok/s"),
    ("e2e_s", "e2e", "s"),
)

DEFINITIONS: tuple[tuple[str, str], ...] = tuple(
    (f.name, f"{f.formula} (over {f.population})") for f in figures.FIGURES
)
"""The report's definitions: ``stress.analysis.figures.FIGURES``, as docs/metrics.md."""


def values(records: list[Record], key: str) -> list[float]:
    """A per-request figure over requests that generated text (None values skipped)."""
    return figures.generated_values(records, key)


def throughput_windows(run: RunData, n_windows: int = 30) -> list[float]:
    """Output tok/s of non-warm-up requests per equal time window.

    Each request's tokens are spread evenly over its decode interval (first token to end),
    so a long reply counts where it was generated.
    """
    duration = run.duration_s
    if duration <= 0:
        return []
    width = max(duration / n_windows, 1e-9)
    edges = np.linspace(0.0, duration, n_windows + 1)
    tokens = np.zeros(n_windows)
    for r in run.main:
        n = r.get("completion_tokens") or 0
        if not n:
            continue
        start = float(r.get("t_start") or 0.0)
        a = start + float(r.get("ttft_s") or 0.0)
        b = start + float(r.get("e2e_s") or 0.0)
        if b <= a:
            i = min(int(b / width), n_windows - 1)
            tokens[i] += n
            continue
        overlap = np.clip(np.minimum(edges[1:], b) - np.maximum(edges[:-1], a), 0.0, None)
        tokens += n * overlap / (b - a)
    return list(tokens / width)


def aggregate_tok_s(run: RunData) -> float | None:
    """The run's ``figures.output_tok_s``: its non-warm-up requests over its duration."""
    return figures.output_tok_s(run.main, run.duration_s)


def headline_stats(run: RunData) -> dict[str, Describe]:
    return {key: describe(values(run.main, key)) for key, _, _ in PER_REQUEST}


def headline_table(run: RunData) -> Table:
    stats = headline_stats(run)
    rows: list[list[str]] = []
    for key, label, unit in PER_REQUEST:
        d = stats[key]
        rows.append([f"{label} ({unit})", mean_sd(d), num(d.p50), num(d.p95), num(d.p99), str(d.n)])
    gap = describe([float(g) for r in run.main if (g := r.get("max_gap_s")) is not None])
    if gap.n:
        rows.append(
            [
                "longest silence (s)",
                mean_sd(gap),
                num(gap.p50),
                num(gap.p95),
                num(gap.p99),
                str(gap.n),
            ]
        )
    windows = throughput_windows(run)
    w = describe(windows)
    agg = aggregate_tok_s(run)
    rows.append(
        [
            "aggregate output (tok/s)",
            f"{num(agg)} ± {num(w.sd)}" if agg is not None else "-",
            num(w.p50),
            num(w.p95),
            num(w.p99),
            f"{w.n} windows",
        ]
    )
    return Table(
        "Headline (non-warm-up requests)",
        ["figure", "mean ± sd", "p50", "p95", "p99", "n"],
        rows,
        note=f"{len(run.requests) - len(run.main)} warm-up requests excluded."
        + (
            f" {sum(run.quality.excluded.values()):,} impossible values excluded (see the "
            "verdict's warnings)."
            if run.quality.excluded
            else ""
        ),
        id="headline",
    )
