"""Capacity planning from one run: where the SLO broke and why (pool vs working set).

The field notes' central lesson: eight ~50k-token conversations nearly fill a 431k-token
KV pool, so each user's blocks are evicted before they return, the hit rate collapses and
TTFT climbs. This module makes that visible from the recorded data alone:

- TTFT p95 / decode p50 by conversation length and by requests in flight (derived from
  overlapping request intervals), against the scenario's SLO;
- the working set (sum of live conversation lengths) over time against the KV pool, and
  cache retention by working set: where the cache stopped holding what users come back to;
- what the levers would change (pool size needed, users that fit, ceiling that fits).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stress.analysis import figures
from stress.analysis.rundata import Record, RunData, end_time
from stress.analysis.stats import describe
from stress.fmt import num, pct, tokens
from stress.report.headline import cached_share
from stress.report.model import Section, Table

FloatArray = npt.NDArray[np.float64]
RETENTION_FLOOR = 0.9
MIN_BUCKET_N = 3
_NICE = (500, 1000, 2000, 2500, 5000, 10_000, 20_000, 25_000, 50_000, 100_000)


@dataclass(frozen=True, slots=True)
class Slo:
    ttft_p95_s: float | None
    decode_p50_tok_s: float | None

    @classmethod
    def of(cls, run: RunData) -> Slo:
        slo = run.scenario.get("slo") or {}
        t, d = slo.get("ttft_p95"), slo.get("decode_tok_s_p50")
        return cls(float(t) if t else None, float(d) if d else None)


def conv_len(r: Record) -> float:
    return float(r.get("conversation_tokens") or r.get("prompt_tokens") or 0)


def bucket_step(max_tokens: float, target: int = 8) -> int:
    for step in _NICE:
        if max_tokens / step <= target:
            return step
    return int(10 ** math.ceil(math.log10(max(1.0, max_tokens / target))))


def _k(v: int) -> str:
    return f"{v / 1000:g}k" if v >= 1000 else str(v)


def in_flight_at_start(records: list[Record]) -> FloatArray:
    """For each request, how many requests (itself included) were in flight as it started."""
    if not records:
        return np.zeros(0)
    starts = np.sort(np.array([float(r.get("t_start") or 0.0) for r in records]))
    ends = np.sort(np.array([end_time(r) for r in records]))
    t = np.array([float(r.get("t_start") or 0.0) for r in records])
    started = np.searchsorted(starts, t, side="right")
    ended = np.searchsorted(ends, t, side="right")
    return (started - ended).astype(float)


def working_set(records: list[Record]) -> tuple[FloatArray, FloatArray]:
    """Step function (times, tokens): sum over users of their live conversation length.

    A user's conversation is its prompt while a request runs, plus the reply once it ends;
    a new conversation (past the ceiling) replaces the old one.
    """
    changes: list[tuple[float, int, float]] = []
    for r in records:
        user = int(r.get("user") or 0)
        size = conv_len(r)
        changes.append((float(r.get("t_start") or 0.0), user, size))
        if r.get("outcome") != "error":
            changes.append((end_time(r), user, size + float(r.get("completion_tokens") or 0)))
    changes.sort(key=lambda c: c[0])
    live: dict[int, float] = {}
    total = 0.0
    times = np.empty(len(changes))
    sums = np.empty(len(changes))
    for i, (t, user, size) in enumerate(changes):
        total += size - live.get(user, 0.0)
        live[user] = size
        times[i], sums[i] = t, total
    return times, sums


def working_set_at(series: tuple[FloatArray, FloatArray], t: FloatArray) -> FloatArray:
    times, sums = series
    if times.size == 0:
        return np.zeros_like(t)
    idx = np.searchsorted(times, t, side="right") - 1
    return np.where(idx >= 0, sums[np.clip(idx, 0, None)], 0.0)


def pool_tokens(run: RunData) -> float | None:
    """The KV pool as ``figures.kv_pool_tokens`` finds it (llama.cpp: the probe's)."""
    probe = run.manifest.get("probe")
    return figures.kv_pool_tokens(
        run.server, run.collector("server"), probe if isinstance(probe, dict) else None
    )


def _slo_mark(value: float | None, limit: float | None, above_is_bad: bool) -> str:
    if value is None or limit is None:
        return ""
    bad = value > limit if above_is_bad else value < limit
    return " ✗" if bad else ""


def length_table(run: RunData, slo: Slo) -> tuple[Table, str | None, str | None]:
    """By conversation length; also the first bucket whose TTFT p95 / decode p50 missed."""
    recs = [r for r in run.main if r.get("outcome") in figures.GENERATED]
    top = max((conv_len(r) for r in recs), default=0.0)
    step = bucket_step(top)
    groups: dict[int, list[Record]] = {}
    for r in recs:
        groups.setdefault(int(conv_len(r) // step), []).append(r)
    rows: list[list[str]] = []
    first_ttft: str | None = None
    first_decode: str | None = None
    for b in sorted(groups):
        g = groups[b]
        label = f"{_k(b * step)}-{_k((b + 1) * step)}"
        ttft = describe([r["ttft_s"] for r in g if r.get("ttft_s") is not None])
        dec = describe([r["decode_tok_s"] for r in g if r.get("decode_tok_s") is not None])
        enough = len(g) >= MIN_BUCKET_N
        if enough and first_ttft is None and _slo_mark(ttft.p95, slo.ttft_p95_s, True):
            first_ttft = f"{label} tokens (TTFT p95 {num(ttft.p95)} s, n={ttft.n})"
        if enough and first_decode is None and _slo_mark(dec.p50, slo.decode_p50_tok_s, False):
            first_decode = f"{label} tokens (decode p50 {num(dec.p50)} tok/s, n={dec.n})"
        rows.append(
            [
                label,
                str(len(g)),
                num(ttft.mean),
                num(ttft.p95) + _slo_mark(ttft.p95, slo.ttft_p95_s, True),
                num(dec.p50) + _slo_mark(dec.p50, slo.decode_p50_tok_s, False),
                pct(cached_share(g)),
            ]
        )
    table = Table(
        "By conversation length",
        ["conversation tokens", "n", "TTFT mean s", "TTFT p95 s", "decode p50 tok/s", "cached"],
        rows,
        note="✗ = misses the scenario's SLO." if slo.ttft_p95_s or slo.decode_p50_tok_s else "",
        id="by-length",
    )
    return table, first_ttft, first_decode


def concurrency_table(run: RunData, slo: Slo) -> tuple[Table, str | None, str | None]:
    recs = [r for r in run.main if r.get("outcome") in figures.GENERATED]
    active = in_flight_at_start(run.main)
    by_id = {id(r): a for r, a in zip(run.main, active, strict=True)}
    groups: dict[int, list[Record]] = {}
    for r in recs:
        groups.setdefault(int(by_id[id(r)]), []).append(r)
    rows: list[list[str]] = []
    first_ttft: str | None = None
    first_decode: str | None = None
    for c in sorted(groups):
        g = groups[c]
        ttft = describe([r["ttft_s"] for r in g if r.get("ttft_s") is not None])
        dec = describe([r["decode_tok_s"] for r in g if r.get("decode_tok_s") is not None])
        enough = len(g) >= MIN_BUCKET_N
        if enough and first_ttft is None and _slo_mark(ttft.p95, slo.ttft_p95_s, True):
            first_ttft = f"{c} requests in flight (TTFT p95 {num(ttft.p95)} s, n={ttft.n})"
        if enough and first_decode is None and _slo_mark(dec.p50, slo.decode_p50_tok_s, False):
            first_decode = f"{c} requests in flight (decode p50 {num(dec.p50)} tok/s)"
        rows.append(
            [
                str(c),
                str(len(g)),
                num(ttft.mean),
                num(ttft.p95) + _slo_mark(ttft.p95, slo.ttft_p95_s, True),
                num(dec.p50) + _slo_mark(dec.p50, slo.decode_p50_tok_s, False),
            ]
        )
    table = Table(
        "By requests in flight (users active at the request's start)",
        ["in flight", "n", "TTFT mean s", "TTFT p95 s", "decode p50 tok/s"],
        rows,
        note="Derived from overlapping request intervals in requests.jsonl.",
        id="by-concurrency",
    )
    return table, first_ttft, first_decode


def retention_by_working_set(run: RunData, pool: float | None) -> tuple[Table, float | None, float]:
    """Cache retention of follow-up turns by the working set at their start.

    Returns the table, the working set at which retention first fell below the floor
    (None if it never did) and the peak working set.
    """
    series = working_set(run.requests)
    peak = float(series[1].max()) if series[1].size else 0.0
    follow = [r for r in run.main if figures.counts_for_retention(r)]
    if not follow or peak <= 0:
        return Table("Cache retention by working set", [], [], id="retention-ws"), None, peak
    ws = working_set_at(series, np.array([float(r.get("t_start") or 0.0) for r in follow]))
    step = bucket_step(peak, 6)
    groups: dict[int, list[int]] = {}
    for i, w in enumerate(ws):
        groups.setdefault(int(w // step), []).append(i)
    rows: list[list[str]] = []
    fell: float | None = None
    for b in sorted(groups):
        idx = groups[b]
        ret = figures.cache_retention([follow[i] for i in idx])
        if fell is None and ret is not None and ret < RETENTION_FLOOR and len(idx) >= 2:
            fell = float(b * step)
        ttft = describe([float(follow[i]["ttft_s"]) for i in idx if follow[i].get("ttft_s")])
        rows.append(
            [
                f"{_k(b * step)}-{_k((b + 1) * step)}",
                pct((b + 0.5) * step / pool) if pool else "-",
                str(len(idx)),
                pct(ret),
                num(ttft.p95),
            ]
        )
    table = Table(
        "Cache retention by working set (follow-up turns)",
        ["working set tokens", "of pool", "n", "retention", "TTFT p95 s"],
        rows,
        note="Retention = cached / reusable tokens: below 100% means this user's blocks were "
        "evicted between turns.",
        id="retention-ws",
    )
    return table, fell, peak


def levers(run: RunData, pool: float | None, peak: float, fell: float | None) -> list[str]:
    out: list[str] = []
    users = int((run.scenario.get("users") or {}).get("count") or 0) or len(
        {r.get("user") for r in run.requests}
    )
    needed = peak * 1.1
    if pool:
        out.append(
            f"Peak working set {tokens(peak)} tokens against a KV pool of {tokens(pool)} "
            f"({pct(peak / pool)} of the pool)."
        )
        if needed > pool:
            per_user = peak / max(users, 1)
            fit = int(pool // per_user) if per_user else users
            ceiling = tokens(pool / max(users, 1) / 1.1)
            out.append(
                f"To hold all live conversations the pool needs at least {tokens(needed)} "
                f"tokens (peak + 10% for replies and block rounding), {needed / pool:.1f}x "
                f"today's. Levers: an fp8 KV cache (about twice the tokens in the same "
                f"memory), more or larger GPUs, at most {fit} user{'' if fit == 1 else 's'} "
                f"at this conversation size, or a conversation ceiling near {ceiling} "
                f"tokens per user for {users} users."
            )
        elif peak > 0.8 * pool:
            out.append(
                "The pool just holds every live conversation, with little headroom: as "
                "conversations grow past this run's size, users will evict each other's "
                "blocks (the field notes' 40% hit rate at 8 x 50k tokens in a 431k pool)."
            )
        else:
            out.append(
                "The pool holds every live conversation with room to spare: cache misses "
                "here are not pool pressure (check prefix caching and the cache mode)."
            )
    elif peak:
        out.append(
            f"Peak working set {tokens(peak)} tokens; the server did not report its KV pool "
            f"size, so compare it with the pool by hand (a pool of at least {tokens(needed)} "
            "tokens holds every live conversation)."
        )
    if fell == 0.0:
        out.append(
            f"Cache retention was below {pct(RETENTION_FLOOR)} at every working set seen: "
            "users' earlier turns were not found in the cache even with a small working set "
            "(prefix caching off, cache mode, or a pool far too small)."
        )
    elif fell is not None:
        out.append(
            f"Cache retention fell below {pct(RETENTION_FLOOR)} once the working set passed "
            f"~{tokens(fell)} tokens" + (f" ({pct(fell / pool)} of the pool)." if pool else ".")
        )
    pre = run.collector("server").get("preemptions")
    if pre:
        out.append(
            f"The server preempted {pre:,.0f} times: the pool ran out mid-request, which "
            "shows as long TTFT with zero errors (field notes: a 191k pool gave 92 s median "
            "TTFT)."
        )
    return out


def capacity_section(run: RunData) -> Section:
    slo = Slo.of(run)
    by_len, len_ttft, len_dec = length_table(run, slo)
    by_conc, conc_ttft, conc_dec = concurrency_table(run, slo)
    pool = pool_tokens(run)
    retention, fell, peak = retention_by_working_set(run, pool)
    paras: list[str] = []
    if slo.ttft_p95_s is None and slo.decode_p50_tok_s is None:
        paras.append(
            "The scenario sets no SLO (slo: {ttft_p95, decode_tok_s_p50}); the tables show "
            "the figures without a threshold."
        )
    if slo.ttft_p95_s is not None:
        where = [w for w in (len_ttft, conc_ttft) if w]
        paras.append(
            f"TTFT p95 SLO {num(slo.ttft_p95_s)} s: "
            + (
                "first missed at " + " and at ".join(where) + "."
                if where
                else "met in every bucket with enough samples."
            )
        )
    if slo.decode_p50_tok_s is not None:
        where = [w for w in (len_dec, conc_dec) if w]
        paras.append(
            f"Decode p50 SLO {num(slo.decode_p50_tok_s)} tok/s: "
            + (
                "first missed at " + " and at ".join(where) + ". In a multi-user run decode "
                "speed is mostly waiting for others' prefill (field note 9); a single-user "
                "context sweep measures the model's own slowdown."
                if where
                else "met in every bucket with enough samples."
            )
        )
    paras += levers(run, pool, peak, fell)
    tables = [by_len, by_conc] + ([retention] if retention.rows else [])
    return Section("capacity", "Capacity", paras, tables)
