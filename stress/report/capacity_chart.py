"""The capacity chart: TTFT p95 and decode p50 against load and conversation length.

Drawn from the capacity answer's buckets (``stress.analysis.capacity``), never from its
own buckets: each point is one bucket with its bootstrap interval as a band, its n
written beside it, the SLO as a red line, and buckets with too few requests drawn hollow
(not judged). The first axis is the sweep's users when the run is a phase sweep, else the
requests in flight; the second is the conversation length (follow-up turns; cold first
turns are a separate point at the left, marked "1st").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from stress.analysis.capacity import Bucket, CapacityAnswer, Limits
from stress.core.limits import MIN_SAMPLES
from stress.report.charts import _plt, to_svg
from stress.report.model import Chart


def _panel(
    ax: Any,
    buckets: Sequence[Bucket],
    value: str,
    limit: float | None,
    color: str,
    xlabel: str,
    ylabel: str,
) -> None:
    x = np.arange(len(buckets), dtype=float)
    y = np.array([getattr(b, value) if getattr(b, value) is not None else np.nan for b in buckets])
    ci_key = "ttft_ci" if value == "ttft_p95" else "decode_ci"
    lo = np.array([(getattr(b, ci_key) or (np.nan, np.nan))[0] for b in buckets])
    hi = np.array([(getattr(b, ci_key) or (np.nan, np.nan))[1] for b in buckets])
    ax.fill_between(x, lo, hi, color=color, alpha=0.18, lw=0, label="95% interval")
    ax.plot(x, y, "-", color=color, lw=1.2)
    judged = np.array([b.n >= MIN_SAMPLES for b in buckets])
    ax.plot(x[judged], y[judged], "o", color=color, label="judged (n ≥ 20)")
    if (~judged).any():
        ax.plot(x[~judged], y[~judged], "o", mfc="white", color=color, label="not enough data")
    for xi, yi, b in zip(x, y, buckets, strict=True):
        if np.isfinite(yi):
            ax.annotate(
                f"n={b.n}",
                (xi, yi),
                textcoords="offset points",
                xytext=(0, 6),
                ha="center",
                fontsize=7,
                color="#555",
            )
    if limit is not None:
        ax.axhline(limit, color="red", lw=1, label="SLO")
    ax.set_xticks(x, [b.label for b in buckets], rotation=30 if len(buckets) > 5 else 0)
    ax.set(xlabel=xlabel, ylabel=ylabel)


def capacity_chart(a: CapacityAnswer, limits: Limits, seconds: str = "s") -> Chart | None:
    """None when the run has no bucket to draw (no request generated text)."""
    load = a.by_users or a.by_concurrency
    length = ([a.first_turns] if a.first_turns and a.first_turns.n else []) + a.by_length
    if not load and not length:
        return None
    load_label = "users (phase sweep)" if a.by_users else "requests in flight at the start"
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4), squeeze=False)
    rate = "tok/s" if seconds == "s" else "tok / simulated s"
    for col, buckets, xlabel in (
        (0, load, load_label),
        (1, length, "conversation tokens (1st = cold first turns)"),
    ):
        if not buckets:
            axes[0][col].set_visible(False)
            axes[1][col].set_visible(False)
            continue
        if col == 1 and a.first_turns and a.first_turns.n:
            buckets = [_relabel(buckets[0], "1st"), *buckets[1:]]
        _panel(
            axes[0][col],
            buckets,
            "ttft_p95",
            limits.ttft_s,
            "tab:blue",
            xlabel,
            f"TTFT p95 ({seconds})",
        )
        _panel(
            axes[1][col],
            buckets,
            "decode_p50",
            limits.decode_tok_s,
            "tab:green",
            xlabel,
            f"decode p50 ({rate})",
        )
    if axes[0][0].get_legend_handles_labels()[0]:  # no SLO, no limit line: nothing to name
        axes[0][0].legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return Chart(
        "capacity",
        "Capacity: TTFT p95 and decode p50 against load and conversation length",
        to_svg(fig, "capacity"),
        (
            "The trace's requests"
            if a.load == "replay"
            else "Follow-up turns (cold first turns apart)"
        )
        + "; bands are bootstrap 95% intervals; hollow points have fewer than 20 requests "
        "and are not judged; red lines are the SLO.",
    )


def _relabel(b: Bucket, label: str) -> Bucket:
    return replace(b, label=label)
