"""Time series for the charts: server counters and GPU samples folded into windows.

Hit rate comes from counter deltas over a window (DESIGN: never a single-scrape gauge);
energy per token from the increments of the server cards' guarded energy accumulators
against tokens generated (the run's total: ``stress.analysis.figures.energy_j``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from stress.analysis import figures
from stress.analysis.rundata import RunData
from stress.collectors.gpu.model import card_label

FloatArray = npt.NDArray[np.float64]
THROTTLING = frozenset(
    {"sw_power_cap", "hw_slowdown", "hw_power_brake", "sw_thermal", "hw_thermal", "board_limit"}
)


@dataclass(slots=True)
class ServerSeries:
    t: FloatArray
    hit_rate: FloatArray
    """Windowed hit rate (NaN where the window saw no prefix queries)."""
    kv_usage: FloatArray
    preemptions: FloatArray
    has_preemptions: bool
    window_s: float


def window_width(run: RunData, n: int = 40) -> float:
    return max(run.duration_s / n, 1.0)


def server_series(run: RunData) -> ServerSeries | None:
    recs = [r for r in run.server if isinstance(r.get("t"), int | float)]
    if not recs:
        return None
    width = window_width(run)
    n = int(run.duration_s // width) + 1
    hits, queries, pre = np.zeros(n), np.zeros(n), np.zeros(n)
    kv_sum, kv_n = np.zeros(n), np.zeros(n)
    has_pre = False
    for r in recs:
        i = min(int(float(r["t"]) // width), n - 1)
        d = r.get("deltas") or {}
        hits[i] += float(d.get("prefix_hits") or 0.0)
        queries[i] += float(d.get("prefix_queries") or 0.0)
        if "preemptions" in d:
            has_pre = True
            pre[i] += float(d["preemptions"] or 0.0)
        kv = r.get("kv_usage")
        if kv is None:
            kv = (r.get("values") or {}).get("kv_usage")
        if kv is not None:
            kv_sum[i] += float(kv)
            kv_n[i] += 1
    with np.errstate(invalid="ignore", divide="ignore"):
        hit = np.where(queries > 0, hits / queries, np.nan)
        kv_mean = np.where(kv_n > 0, kv_sum / kv_n, np.nan)
    t = (np.arange(n, dtype=np.float64) + 0.5) * width
    return ServerSeries(t, hit, kv_mean, pre, has_pre, width)


@dataclass(slots=True)
class CardSeries:
    key: str
    label: str
    t: list[float] = field(default_factory=list)
    power_w: list[float] = field(default_factory=list)
    temp_c: list[float] = field(default_factory=list)
    sm_mhz: list[float] = field(default_factory=list)
    energy_j: list[float] = field(default_factory=list)
    throttled: list[bool] = field(default_factory=list)
    throttle_reasons: Counter[str] = field(default_factory=Counter)
    """Samples in which each throttle reason was active."""
    power_limit_w: float | None = None


def _nan(v: object) -> float:
    return float(v) if isinstance(v, int | float) else float("nan")


SIMULATED_NOTE = (
    "Simulated GPUs of the built-in simulator (no real card was read): their power follows "
    "the simulated load."
)


def simulated_gpus(run: RunData) -> bool:
    """The run's GPUs are the built-in simulator's simulated cards (never mixed with real
    ones: a run against the simulator reads only those)."""
    if run.collector("gpu").get("simulated") is True:
        return True
    return any(c.get("simulated") is True for c in run.gpu_cards)


def gpu_series(run: RunData) -> list[CardSeries]:
    """Each card's readings over time, on the run's one clock (simulated seconds for a
    time-scaled simulator run, like the requests: ``load_run`` rescales the samples)."""
    names = {str(c.get("key")): card_label(c.get("name"), c.get("bus_id")) for c in run.gpu_cards}
    cards: dict[str, CardSeries] = {}
    for rec in run.gpu_samples:
        for c in rec.get("cards") or []:
            key = str(c.get("key"))
            s = cards.get(key)
            if s is None:
                s = cards[key] = CardSeries(key, names.get(key) or card_label(c.get("name"), key))
            s.t.append(float(c.get("t", rec.get("t", 0.0))))
            s.power_w.append(_nan(c.get("power_w")))
            s.temp_c.append(_nan(c.get("temp_c")))
            s.sm_mhz.append(_nan(c.get("sm_mhz")))
            s.energy_j.append(_nan(c.get("energy_j")))
            reasons = set(c.get("throttle") or [])
            s.throttled.append(bool(THROTTLING & reasons))
            s.throttle_reasons.update(reasons & THROTTLING)
            if c.get("power_limit_w") is not None:
                s.power_limit_w = float(c["power_limit_w"])
    return list(cards.values())


def energy_per_token(run: RunData, cards: list[CardSeries]) -> tuple[FloatArray, FloatArray]:
    """(window centres, J per output token) from energy increments and tokens per window."""
    width = window_width(run, 20)
    n = int(run.duration_s // width) + 1
    energy = np.zeros(n)
    server = set(run.server_cards or [])
    for c in cards:
        if server and c.key not in server:
            continue
        e = np.asarray(c.energy_j)
        t = np.asarray(c.t)
        ok = np.isfinite(e)
        e, t = e[ok], t[ok]
        if e.size < 2:
            continue
        inc = np.clip(np.diff(e), 0.0, None)
        idx = np.minimum((t[1:] // width).astype(int), n - 1)
        np.add.at(energy, idx, inc)
    toks = np.zeros(n)
    for r in run.requests:
        end = float(r.get("t_start") or 0.0) + float(r.get("e2e_s") or 0.0)
        toks[min(int(end // width), n - 1)] += float(r.get("completion_tokens") or 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        jpt = np.where(toks > 0, energy / toks, np.nan)
    return (np.arange(n, dtype=np.float64) + 0.5) * width, np.asarray(jpt, dtype=np.float64)


def total_energy_j(run: RunData) -> float | None:
    """The run's GPU energy over the server's cards, as ``stress.analysis.figures.energy_j``
    defines it (the GPU collector's own figure)."""
    return figures.energy_j(run.collector("gpu") or None, run.gpu_samples, run.server_cards)
