"""The report's charts, drawn with matplotlib (Agg) into inline SVG strings.

People would rather look than read. Every chart is a self-contained ``<svg>`` element so
report.html needs no network and no JavaScript. matplotlib is imported here only, lazily,
so ``stress run`` never pays for it. A chart whose data the run lacks (no server metrics,
no GPU telemetry) is simply not drawn.
"""

from __future__ import annotations

import io
import re
from typing import TYPE_CHECKING, Any

import numpy as np

from stress.analysis import figures
from stress.analysis.capacity import Limits, pool_tokens
from stress.analysis.causes import run_working_set
from stress.analysis.rundata import Record, RunData
from stress.report.model import Chart
from stress.report.series import (
    SIMULATED_NOTE,
    energy_per_token,
    gpu_series,
    server_series,
    simulated_gpus,
)

if TYPE_CHECKING:
    from matplotlib.figure import Figure

RASTER_ABOVE = 1500
"""Scatter plots with more points are embedded as an image inside the SVG (size, speed)."""
_XML_HEAD = re.compile(rb"^.*?(?=<svg)", re.S)


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.fonttype": "none",
            "font.size": 9,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "figure.dpi": 96,
        }
    )
    return plt


def to_svg(fig: Figure, chart_id: str) -> str:
    import matplotlib

    plt = _plt()
    with matplotlib.rc_context({"svg.hashsalt": chart_id}):
        buf = io.BytesIO()
        fig.savefig(buf, format="svg", bbox_inches="tight")
    plt.close(fig)
    svg = _XML_HEAD.sub(b"", buf.getvalue(), count=1).decode("utf-8")
    return svg.replace("<svg ", f'<svg role="img" aria-label="{chart_id}" ', 1)


def simulated(run: RunData) -> bool:
    """A time-scaled simulator run: its times are simulated seconds (``load_run``)."""
    return run.files.time_scale != 1.0


def seconds(run: RunData) -> str:
    """The unit of a duration axis: ``s``, or ``simulated s``."""
    return "simulated s" if simulated(run) else "s"


def time_unit(run: RunData) -> tuple[float, str]:
    """Minutes for long runs, seconds for short ones: (divisor, axis label)."""
    clock = "simulated " if simulated(run) else ""
    if run.duration_s >= 300:
        return 60.0, f"{clock}minutes into the run"
    return 1.0, f"{clock}seconds into the run"


def ttft_over_time(run: RunData, slo: Limits) -> Chart | None:
    recs = [r for r in run.requests if r.get("ttft_s") is not None]
    if not recs:
        return None
    div, xlabel = time_unit(run)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 3))
    for warm, colour, label in ((False, "tab:blue", "requests"), (True, "0.6", "warm-up")):
        g = [r for r in recs if bool(r.get("warmup")) == warm]
        if g:
            ax.scatter(
                [float(r.get("t_start") or 0.0) / div for r in g],
                [r["ttft_s"] for r in g],
                s=6,
                c=colour,
                label=label,
                rasterized=len(recs) > RASTER_ABOVE,
            )
    if slo.ttft_s:
        ax.axhline(slo.ttft_s, color="red", lw=1, label="SLO p95")
    ax.set(xlabel=xlabel, ylabel=f"TTFT ({seconds(run)})")
    ax.legend(loc="upper left")
    return Chart("ttft-over-time", "TTFT over time", to_svg(fig, "ttft-over-time"))


def cache_and_kv(run: RunData) -> Chart | None:
    ss = server_series(run)
    times, ws = run_working_set(run)
    if ss is None and times.size == 0:
        return None
    pool = pool_tokens(run)
    div, xlabel = time_unit(run)
    plt = _plt()
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(9, 5), sharex=True)
    if ss is not None:
        a1.plot(ss.t / div, ss.hit_rate * 100, "o-", ms=3, label="prefix-cache hit rate")
        a1.plot(ss.t / div, ss.kv_usage * 100, "-", label="KV pool usage")
    a1.set(ylabel="%", ylim=(0, 105), title="Server: hit rate and KV usage")
    if ss is not None:
        a1.legend(loc="lower right")
    else:
        a1.text(0.5, 0.5, "no server metrics in this run", ha="center", transform=a1.transAxes)
    if times.size:
        a2.step(times / div, ws / 1000, where="post", label="working set (live conversations)")
    if pool:
        a2.axhline(pool / 1000, color="red", lw=1.2, label=f"KV pool {pool:,.0f} tokens")
    a2.set(xlabel=xlabel, ylabel="k tokens", title="Working set vs KV pool")
    a2.legend(loc="upper left")
    return Chart(
        "cache-kv-over-time",
        "Prefix-cache hit rate, KV usage and working set over time",
        to_svg(fig, "cache-kv-over-time"),
        "Hit rate from counter deltas per window, never a single-scrape gauge.",
    )


def preemptions(run: RunData) -> Chart | None:
    ss = server_series(run)
    if ss is None or not ss.has_preemptions:
        return None
    div, xlabel = time_unit(run)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 2.6))
    ax.bar(ss.t / div, ss.preemptions, width=ss.window_s / div * 0.9, color="tab:red")
    ax.set(
        xlabel=xlabel,
        ylabel=f"per {ss.window_s:.0f} {seconds(run)}",
        title=f"Preemptions (total {ss.preemptions.sum():,.0f})",
    )
    return Chart("preemptions-over-time", "Preemptions over time", to_svg(fig, "preemptions"))


MAX_USER_BARS = 200
"""Past this many users the retention chart is a histogram over users, not a bar each."""


def retention_per_user(run: RunData) -> Chart | None:
    by_user: dict[int, list[Record]] = {}
    for r in run.main:  # one pass: thousands of users times their records was minutes
        by_user.setdefault(int(r.get("user") or 0), []).append(r)
    users = sorted(by_user)
    vals = [figures.cache_retention(by_user[u]) for u in users]
    if not any(v is not None for v in vals):
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 2.6))
    if len(users) <= MAX_USER_BARS:
        ax.bar([str(u) for u in users], [100 * (v or 0.0) for v in vals], color="tab:purple")
        ax.axhline(100, color="0.4", lw=1)
        ax.set(xlabel="user", ylabel="retention %", ylim=(0, 110))
    else:  # a bar per user is unreadable past a few hundred: how users spread instead
        ax.hist(
            [100 * v for v in vals if v is not None], bins=20, range=(0, 100), color="tab:purple"
        )
        ax.set(xlabel="retention %", ylabel="users")
    ax.set_title("Cache retention per user (cached / reusable tokens)")
    return Chart("retention-per-user", "Per-user cache retention", to_svg(fig, "retention"))


MAX_POINTS = 600
"""Telemetry lines are averaged down to this many points: a chart is ~900 px wide."""


def _binned(t: list[float], y: list[float], n_bins: int) -> tuple[Any, Any]:
    """Mean of ``y`` in ``n_bins`` equal time bins (NaN where a bin has no reading)."""
    ta = np.asarray(t, dtype=float)
    ya = np.asarray(y, dtype=float)
    if ta.size <= n_bins:
        return ta, ya
    edges = np.linspace(ta.min(), ta.max(), n_bins + 1)
    idx = np.clip(np.searchsorted(edges, ta, side="right") - 1, 0, n_bins - 1)
    ok = np.isfinite(ya)
    sums = np.bincount(idx[ok], weights=ya[ok], minlength=n_bins)
    counts = np.bincount(idx[ok], minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return (edges[:-1] + edges[1:]) / 2, means


def _shade(axes: Any, cards: list[Any], div: float) -> None:
    """One shaded band per axis where any card reported a throttle reason."""
    t_all = np.concatenate([np.asarray(c.t, dtype=float) for c in cards])
    f_all = np.concatenate([np.asarray(c.throttled, dtype=float) for c in cards])
    if not f_all.any():
        return
    t, frac = _binned(list(t_all), list(f_all), MAX_POINTS)
    flag = np.nan_to_num(frac) > 0
    for ax in axes:
        ax.fill_between(
            t / div,
            0,
            1,
            where=flag,
            step="mid",
            color="orange",
            alpha=0.25,
            lw=0,
            transform=ax.get_xaxis_transform(),
            label="throttled",
        )


def gpu(run: RunData) -> list[Chart]:
    cards = gpu_series(run)
    if not cards:
        return []
    div, xlabel = time_unit(run)
    plt = _plt()
    fig, axes = plt.subplots(3, 1, figsize=(9, 6.5), sharex=True)
    for c in cards:
        for ax, ys in zip(axes, (c.power_w, c.temp_c, c.sm_mhz), strict=True):
            t, y = _binned(c.t, ys, MAX_POINTS)
            ax.plot(t / div, y, lw=1, label=c.label)
        if c.power_limit_w:
            axes[0].axhline(c.power_limit_w, color="0.5", lw=0.8, ls="--")
    _shade(axes, cards, div)
    axes[0].set(ylabel="W", title="GPU power (dashed: limit; shaded: throttled)")
    axes[1].set(ylabel="°C", title="Temperature")
    axes[2].set(ylabel="MHz", title="SM clock", xlabel=xlabel)
    axes[0].legend(loc="lower right", fontsize=7)
    note = "This machine's cards as measured, on the simulated clock." if simulated(run) else ""
    if simulated_gpus(run):
        note = SIMULATED_NOTE + (" On the simulated clock." if simulated(run) else "")
    out = [Chart("gpu-over-time", "GPU power, temperature and clocks", to_svg(fig, "gpu"), note)]
    t_e, jpt = energy_per_token(run, cards)
    if np.isfinite(jpt).any():
        fig, ax = plt.subplots(figsize=(9, 2.6))
        ax.plot(t_e / div, jpt, "o-", ms=3, color="tab:orange")
        ax.set(
            xlabel=xlabel,
            ylabel="J / output token",
            title="Energy per output token",
        )
        out.append(Chart("energy-per-token", "Energy per token", to_svg(fig, "energy")))
    return out


def all_charts(run: RunData) -> list[Chart]:
    slo = Limits.of(run)
    charts = [  # by length and by load: the capacity chart (stress.report.capacity_chart)
        ttft_over_time(run, slo),
        cache_and_kv(run),
        preemptions(run),
        retention_per_user(run),
    ]
    out = [c for c in charts if c is not None]
    return out + gpu(run)
