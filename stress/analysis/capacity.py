"""The capacity answer: how far this server stayed within the SLO, and what limited it.

One sentence and the numbers behind it, decided here once and shown by the end-of-run
summary, ``summary.json``, the report (its first section and chart) and ``stress ls``:

    "8 users, conversations up to 50k tokens: TTFT p95 11.4 s [10.2-12.9] vs SLO 10 s,
    MISSED x1.14; within SLO up to ~6 concurrent requests and ~30k tokens; limited by
    prefill queueing"

Rules (issue 13; docs/reports.md explains each):

- first turns of a conversation (cold: nothing of it is cached yet) are kept apart from
  follow-up turns, so a long paste's prefill is not read as "the SLO broke at 0-5k tokens";
- a bucket with fewer than ``MIN_SAMPLES`` requests is "not enough data", never judged;
- percentiles carry a bootstrap 95 % interval (``stats.percentile_interval``);
- requests in flight are bucketed on a ~sqrt(2) ladder (1, 2, 3-4, 5-6, 7-8, 9-12, ...),
  conversation length on round token steps, cache retention by the working set's share
  of the KV pool;
- goodput: the share of turns (non-warm-up, every outcome) answered within the SLO's
  per-request limits (TTFT <= the TTFT limit, decode speed >= the decode floor), overall
  and per user;
- in a phase sweep, each step's users are a bucket too: "within SLO up to N users".
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from stress.analysis import figures
from stress.analysis.arrivals import open_load
from stress.analysis.causes import Cause, name_causes, run_working_set
from stress.analysis.figures import Record, conv_len, token_step
from stress.analysis.judge import SloCheck, slo_checks
from stress.analysis.rundata import RunData, end_time
from stress.analysis.server_kind import (
    PastSlots,
    SlotLayout,
    past_slots,
    server_kind,
    shared_pool_tokens,
    slot_layout,
)
from stress.analysis.stats import percentile_interval
from stress.core.fmt import num, tokens
from stress.core.limits import MIN_SAMPLES

BucketStatus = Literal["MET", "MISSED", "NOT ENOUGH DATA", "NO SLO"]
LoadKind = Literal["users", "sessions", "replay"]
"""Closed-loop users, open-loop sessions arriving at a rate, or a trace's requests."""
RETENTION_FLOOR = 0.9
"""Below this share of reusable tokens kept, the cache no longer holds the users' turns."""
POOL_SHARES = (0.25, 0.5, 0.75, 0.9, 1.0, 1.25, 1.5, 2.0)
"""Upper edges of the working-set buckets, as shares of the KV pool (the last is open)."""
_LADDER = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


@dataclass(frozen=True, slots=True)
class Limits:
    """The SLO's per-request limits (None: not set)."""

    ttft_s: float | None
    decode_tok_s: float | None

    @classmethod
    def of(cls, run: RunData) -> Limits:
        slo = run.scenario.get("slo") or {}
        t, d = slo.get("ttft_p95"), slo.get("decode_tok_s_p50")
        ok = (int, float)
        return cls(
            float(t) if isinstance(t, ok) and t > 0 else None,
            float(d) if isinstance(d, ok) and d > 0 else None,
        )

    @property
    def any(self) -> bool:
        return self.ttft_s is not None or self.decode_tok_s is not None

    def good(self, r: Record) -> bool:
        """A turn answered within the SLO's per-request limits."""
        if r.get("outcome") != "ok":
            return False
        ttft, dec = r.get("ttft_s"), r.get("decode_tok_s")
        if self.ttft_s is not None and (ttft is None or float(ttft) > self.ttft_s):
            return False
        return not (self.decode_tok_s is not None and dec is not None and dec < self.decode_tok_s)


@dataclass(frozen=True, slots=True)
class Bucket:
    """Requests whose axis value lies in [lo, hi): their figures and their judgement."""

    label: str
    lo: float
    hi: float
    n: int
    ttft_p95: float | None
    ttft_ci: tuple[float, float] | None
    decode_p50: float | None
    decode_ci: tuple[float, float] | None
    goodput: float | None
    cached_share: float | None
    status: BucketStatus
    factor: float | None
    """The worst SLO factor in this bucket (>1 missed)."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "lo": self.lo,
            "hi": self.hi,
            "n": self.n,
            "ttft_p95_s": self.ttft_p95,
            "ttft_p95_ci": list(self.ttft_ci) if self.ttft_ci else None,
            "decode_p50_tok_s": self.decode_p50,
            "decode_p50_ci": list(self.decode_ci) if self.decode_ci else None,
            "goodput": self.goodput,
            "cached_share": self.cached_share,
            "status": self.status,
            "factor": self.factor,
        }


def make_bucket(label: str, lo: float, hi: float, recs: list[Record], limits: Limits) -> Bucket:
    """Figures of ``recs`` (requests that generated text and any others: goodput counts
    failures as not good) and the bucket's judgement against ``limits``."""
    gen = [r for r in recs if r.get("outcome") in figures.GENERATED]
    ttft = figures.generated_values(gen, "ttft_s")
    dec = figures.generated_values(gen, "decode_tok_s")
    enough = len(gen) >= MIN_SAMPLES
    p95 = figures.percentile(ttft, 95)
    p50 = figures.percentile(dec, 50)
    factors: list[float] = []
    if limits.ttft_s is not None and p95 is not None:
        factors.append(p95 / limits.ttft_s)
    if limits.decode_tok_s is not None and p50 is not None:
        factors.append(limits.decode_tok_s / p50 if p50 > 0 else math.inf)
    factor = max(factors) if factors else None
    status: BucketStatus
    if not limits.any:
        status = "NO SLO"
    elif not enough:
        status = "NOT ENOUGH DATA"
    else:
        status = "MISSED" if (factor or 0.0) > 1.0 else "MET"
    known = [r for r in gen if r.get("cached_tokens") is not None and r.get("prompt_tokens")]
    prompt = sum(float(r["prompt_tokens"]) for r in known)
    return Bucket(
        label=label,
        lo=lo,
        hi=hi,
        n=len(gen),
        ttft_p95=p95,
        ttft_ci=percentile_interval(ttft, 95, clusters=figures.generated_users(gen, "ttft_s"))
        if enough
        else None,
        decode_p50=p50,
        decode_ci=percentile_interval(
            dec, 50, clusters=figures.generated_users(gen, "decode_tok_s")
        )
        if enough
        else None,
        goodput=sum(limits.good(r) for r in recs) / len(recs) if recs and limits.any else None,
        cached_share=sum(float(r["cached_tokens"]) for r in known) / prompt if prompt else None,
        status=status,
        factor=factor,
    )


def within(buckets: Sequence[Bucket]) -> tuple[Bucket | None, Bucket | None]:
    """(last bucket that met the SLO before the first judged miss, that first miss), in
    axis order; buckets without enough data are skipped, never judged."""
    met: Bucket | None = None
    for b in buckets:
        if b.status == "MISSED":
            return met, b
        if b.status == "MET":
            met = b
    return met, None


# --- axes ------------------------------------------------------------------------


def _share(v: float) -> str:
    return f"{100 * v:g}%"


def _k(v: float) -> str:
    return f"{v / 1000:g}k" if v >= 1000 else f"{v:g}"


def ladder_edges(top: float) -> list[int]:
    """Upper edges (inclusive) of in-flight buckets: 1, 2, 4, 6, 8, 12, 16, ... up to
    ``top`` (at most ~10 buckets for any run up to 1,024 requests in flight)."""
    edges = [e for e in _LADDER if e < top] + [math.ceil(top)]
    return sorted(set(edges))


def in_flight_at_start(records: list[Record]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """For each request, how many requests (itself included) were in flight as it started."""
    if not records:
        return np.zeros(0)
    t = np.array([float(r.get("t_start") or 0.0) for r in records])
    starts = np.sort(t)
    ends = np.sort(np.array([end_time(r) for r in records]))
    started = np.searchsorted(starts, t, side="right")
    ended = np.searchsorted(ends, t, side="right")
    return (started - ended).astype(float)


def is_first_turn(r: Record) -> bool:
    """The first turn of a conversation: nothing of it can be cached yet (cold)."""
    return int(r.get("turn") or 1) <= 1


def by_length(follow: list[Record], limits: Limits) -> list[Bucket]:
    top = max((conv_len(r) for r in follow), default=0.0)
    if top <= 0:
        return []
    step = token_step(top)
    groups: dict[int, list[Record]] = {}
    for r in follow:
        groups.setdefault(int(conv_len(r) // step), []).append(r)
    return [
        make_bucket(f"{_k(b * step)}-{_k((b + 1) * step)}", b * step, (b + 1) * step, g, limits)
        for b, g in sorted(groups.items())
    ]


def by_concurrency(main: list[Record], follow_ids: set[int], limits: Limits) -> list[Bucket]:
    """Follow-up turns by requests in flight as they started (counting every request)."""
    active = in_flight_at_start(main)
    pairs = [(a, r) for a, r in zip(active, main, strict=True) if id(r) in follow_ids]
    if not pairs:
        return []
    edges = ladder_edges(max(a for a, _ in pairs))
    out: list[Bucket] = []
    lo = 1
    for hi in edges:
        g = [r for a, r in pairs if lo <= a <= hi]
        if g:
            label = str(hi) if lo == hi else f"{lo}-{hi}"
            out.append(make_bucket(label, lo, hi, g, limits))
        lo = hi + 1
    return out


def by_users(main: list[Record], limits: Limits) -> list[Bucket]:
    """A phase sweep's steps by their user count (passes of one step pooled); empty for a
    run without phases or with one user count."""
    phase_users: dict[str, set[int]] = {}
    for r in main:
        phase_users.setdefault(str(r.get("phase") or "main"), set()).add(int(r.get("user") or 0))
    counts: dict[int, list[Record]] = {}
    for r in main:
        n = len(phase_users[str(r.get("phase") or "main")])
        counts.setdefault(n, []).append(r)
    if len(counts) < 2:
        return []
    return [
        make_bucket(f"{n} users", n, n, [r for r in g if not is_first_turn(r)], limits)
        for n, g in sorted(counts.items())
    ]


@dataclass(frozen=True, slots=True)
class RetentionBucket:
    label: str
    share_lo: float | None
    """Working set / pool at the bucket's lower edge (None: no pool known)."""
    n: int
    retention: float | None
    ttft_p95: float | None


def retention_buckets(
    run: RunData, pool: float | None
) -> tuple[list[RetentionBucket], float | None, float]:
    """Cache retention of follow-up turns by the working set as they started: by its share
    of the KV pool when the pool is known, else by round token steps. Also the working set
    at which retention first fell below ``RETENTION_FLOOR`` (None: it never did) and the
    peak working set."""
    times, sums = run_working_set(run)
    peak = float(sums.max()) if sums.size else 0.0
    follow = [r for r in figures.main_requests(run.requests) if figures.counts_for_retention(r)]
    if not follow or peak <= 0:
        return [], None, peak
    t = np.array([float(r.get("t_start") or 0.0) for r in follow])
    idx = np.searchsorted(times, t, side="right") - 1
    ws = np.where(idx >= 0, sums[np.clip(idx, 0, None)], 0.0)
    if pool:
        edges = [s * pool for s in POOL_SHARES] + [math.inf]
        labels = [f"<{_share(POOL_SHARES[0])}"] + [
            f"{_share(a)}-{_share(b)}" for a, b in itertools.pairwise(POOL_SHARES)
        ]
        labels.append(f">{_share(POOL_SHARES[-1])}")
    else:
        step = token_step(peak, 6)
        n_b = int(peak // step) + 1
        edges = [(i + 1) * step for i in range(n_b)]
        labels = [f"{_k(i * step)}-{_k((i + 1) * step)}" for i in range(n_b)]
    groups: dict[int, list[Record]] = {}
    for w, r in zip(ws, follow, strict=True):
        groups.setdefault(int(np.searchsorted(edges, w, side="right")), []).append(r)
    out: list[RetentionBucket] = []
    fell: float | None = None
    for b in sorted(groups):
        g = groups[b]
        ret = figures.cache_retention(g)
        lo = 0.0 if b == 0 else float(edges[b - 1])
        if fell is None and ret is not None and ret < RETENTION_FLOOR and len(g) >= 2:
            fell = lo
        out.append(
            RetentionBucket(
                labels[min(b, len(labels) - 1)],
                lo / pool if pool else None,
                len(g),
                ret,
                figures.percentile(figures.generated_values(g, "ttft_s"), 95),
            )
        )
    return out, fell, peak


# --- the answer ------------------------------------------------------------------


@dataclass(slots=True)
class CapacityAnswer:
    users: int
    max_conversation_tokens: float
    slo: list[SloCheck]
    first_turns: Bucket | None
    """Cold first turns of conversations, judged apart."""
    by_length: list[Bucket]
    by_concurrency: list[Bucket]
    by_users: list[Bucket]
    retention: list[RetentionBucket]
    retention_fell_at: float | None
    peak_working_set: float
    pool_tokens: float | None
    """The shared KV pool (vLLM, SGLang); None on llama.cpp, whose slots are not one."""
    users_fit_pool: float | None
    """Users whose conversations (at this run's peak per-user size) the pool holds."""
    goodput: float | None
    goodput_by_user: dict[int, float]
    causes: list[Cause]
    figures_text: str = ""
    """TTFT p95 and decode p50 with their intervals (what the sentence says without SLO)."""
    sentence: str = ""
    within: dict[str, str] = field(default_factory=dict)
    """Per axis ("users", "concurrency", "length"): "up to ~6" style phrase."""
    open_loop: bool = False
    """Sessions arrived at a rate (``arrivals:``): ``users`` is the most at once."""
    load: LoadKind = "users"
    """What ``users`` counts: users, sessions at once, or (a replay) requests in flight."""
    slots: SlotLayout | None = None
    """llama.cpp's slots, each its own context: the capacity in place of a pool."""
    past_slots: PastSlots | None = None
    """llama.cpp: the turns whose slot was most likely taken, and what the tier below the
    slots (the host-RAM prompt cache) still held for them."""
    server_kind: str | None = None
    """The server's dialect (``server_kind.server_kind``); None: unknown."""
    replay: dict[str, float] = field(default_factory=dict)
    """A replay's ``requests``, ``span_s`` (first to last send) and ``req_s``."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "sentence": self.sentence,
            "users": self.users,
            "open_loop": self.open_loop,
            "load": self.load,
            "replay": self.replay or None,
            "max_conversation_tokens": self.max_conversation_tokens,
            "slo": [c.as_dict() for c in self.slo],
            "within": self.within,
            "first_turns": self.first_turns.as_dict() if self.first_turns else None,
            "by_length": [b.as_dict() for b in self.by_length],
            "by_concurrency": [b.as_dict() for b in self.by_concurrency],
            "by_users": [b.as_dict() for b in self.by_users],
            "retention": [
                {
                    "label": b.label,
                    "pool_share_lo": b.share_lo,
                    "n": b.n,
                    "retention": b.retention,
                    "ttft_p95_s": b.ttft_p95,
                }
                for b in self.retention
            ],
            "retention_fell_at_tokens": self.retention_fell_at,
            "peak_working_set_tokens": self.peak_working_set,
            "kv_pool_tokens": self.pool_tokens,
            "users_fit_pool": self.users_fit_pool,
            "slots": self.slots.count if self.slots else None,
            "slot_context_tokens": self.slots.context_tokens if self.slots else None,
            "past_slots": asdict(self.past_slots) if self.past_slots else None,
            "goodput": self.goodput,
            "goodput_by_user": {str(k): v for k, v in sorted(self.goodput_by_user.items())},
            "causes": [
                {
                    "code": c.code,
                    "title": c.title,
                    "text": c.text,
                    "weight": c.weight,
                    "minor": c.minor,
                }
                for c in self.causes
            ],
        }


def pool_tokens(run: RunData) -> float | None:
    """The shared KV pool as ``figures.kv_pool_tokens`` finds it; None on llama.cpp, whose
    slots are separate contexts (``server_kind.shared_pool_tokens``)."""
    return shared_pool_tokens(run)


def _within_phrase(
    buckets: list[Bucket], unit: Callable[[Bucket], str], what: str
) -> tuple[str, str]:
    """(key phrase for the sentence, the same for summary.json) for one axis."""
    met, missed = within(buckets)
    if met is not None and missed is not None:
        return f"~{unit(met)}{what}", f"met up to {unit(met)}, missed at {unit(missed)}"
    if met is not None:
        return f"{unit(met)}{what} (all measured)", f"met up to {unit(met)}"
    if missed is not None:
        return "", f"missed from {unit(missed)} (the lowest level judged)"
    return "", "not enough data"


def load_kind(run: RunData) -> LoadKind:
    """What the run's load was: a trace replayed, open-loop sessions, or closed-loop users."""
    if run.scenario.get("replay"):
        return "replay"
    return "sessions" if run.scenario.get("arrivals") else "users"


def replay_load(main: list[Record]) -> dict[str, float]:
    """A replay's requests, the span from the first send to the last (the run's clock:
    simulated seconds in a time-scaled simulator run) and the requests per second."""
    sends = sorted(float(r.get("t_sched") or r.get("t_start") or 0.0) for r in main)
    span = sends[-1] - sends[0] if len(sends) > 1 else 0.0
    rate = (len(sends) - 1) / span if span > 0 else 0.0
    return {"requests": float(len(sends)), "span_s": span, "req_s": rate}


def capacity_answer(run: RunData, checks: list[SloCheck] | None = None) -> CapacityAnswer:
    """The capacity answer of one run (``checks``: the verdict's SLO checks, when the
    caller has them already). A replay's requests are single turns of a trace whose
    prefixes it shares: none is a conversation's cold first turn, so all are bucketed."""
    limits = Limits.of(run)
    main = figures.main_requests(run.requests)
    kind = load_kind(run)
    first = [r for r in main if is_first_turn(r)] if kind != "replay" else []
    follow = [r for r in main if not is_first_turn(r)] if kind != "replay" else main
    load = open_load(run) if kind == "sessions" else None
    users = load.max_active if load is not None else run.peak_users
    if kind == "replay":
        users = int(in_flight_at_start(main).max()) if main else 0
    top = max((conv_len(r) for r in main), default=0.0)
    pool = pool_tokens(run)
    retention, fell, peak = retention_buckets(run, pool)
    per_user_peak = _per_user_peak(run.requests)
    answer = CapacityAnswer(
        users=users,
        max_conversation_tokens=top,
        slo=slo_checks(run) if checks is None else checks,
        first_turns=make_bucket("first turns (cold)", 0, top, first, limits) if first else None,
        by_length=by_length(follow, limits),
        by_concurrency=by_concurrency(main, {id(r) for r in follow}, limits),
        by_users=by_users(main, limits),
        retention=retention,
        retention_fell_at=fell,
        peak_working_set=peak,
        pool_tokens=pool,
        users_fit_pool=pool / per_user_peak if pool and per_user_peak else None,
        goodput=sum(limits.good(r) for r in main) / len(main) if main and limits.any else None,
        goodput_by_user=_goodput_by_user(main, limits),
        causes=name_causes(run),
        open_loop=load is not None,
        load=kind,
        slots=slot_layout(run),
        past_slots=past_slots(run),
        server_kind=server_kind(run),
        replay=replay_load(main) if kind == "replay" else {},
    )
    answer.figures_text = figures_text(main)
    answer.sentence = _sentence(answer)
    return answer


def _goodput_by_user(main: list[Record], limits: Limits) -> dict[int, float]:
    """Each user's share of turns within the SLO's limits; empty without limits."""
    if not limits.any:
        return {}
    by_user: dict[int, list[Record]] = {}
    for r in main:
        by_user.setdefault(int(r.get("user") or 0), []).append(r)
    return {u: sum(limits.good(r) for r in g) / len(g) for u, g in by_user.items()}


def figures_text(main: list[Record]) -> str:
    """'TTFT p95 1.4 s [1.2-1.6], decode p50 17 tok/s [15-18]' over the headline population."""
    parts: list[str] = []
    for label, key, q, unit in (
        ("TTFT p95", "ttft_s", 95, "s"),
        ("decode p50", "decode_tok_s", 50, "tok/s"),
    ):
        values = figures.generated_values(main, key)
        if not values:
            continue
        users = figures.generated_users(main, key)
        ci = percentile_interval(values, q, clusters=users) if len(values) >= MIN_SAMPLES else None
        text = f"{label} {num(figures.percentile(values, q))} {unit}"
        parts.append(text + (f" [{num(ci[0])}-{num(ci[1])}]" if ci else f" (n = {len(values)})"))
    return ", ".join(parts) or "no request generated text"


def _per_user_peak(records: Sequence[Record]) -> float:
    """The mean over users of each one's largest conversation (prompt + reply) in tokens."""
    peaks: dict[int, float] = {}
    for r in records:
        size = conv_len(r) + float(r.get("completion_tokens") or 0)
        u = int(r.get("user") or 0)
        peaks[u] = max(peaks.get(u, 0.0), size)
    return float(np.mean(list(peaks.values()))) if peaks else 0.0


def _head(a: CapacityAnswer) -> str:
    """What ran: users, sessions arriving, or a trace's requests, and how long they got."""
    if a.load == "replay":  # single requests at the trace's times: a rate, not users
        n, rate = int(a.replay.get("requests", 0)), a.replay.get("req_s", 0.0)
        head = f"replay of {n:,} trace request{'' if n == 1 else 's'}"
        head += f" at {num(rate)} requests/s" if rate else ""
        head += f", up to {a.users:,} in flight at once"
        if a.max_conversation_tokens:
            head += f", prompts up to {tokens(a.max_conversation_tokens)} tokens"
        return head
    if a.open_loop:  # sessions come and go: how many ran at once is the load
        head = f"open-loop arrivals, up to {a.users:,} session{'' if a.users == 1 else 's'} at once"
    elif a.by_users:
        head = f"{a.by_users[0].lo:g}-{a.by_users[-1].lo:g} users (a phase sweep)"
    else:
        head = f"{a.users:,} user{'' if a.users == 1 else 's'}"
    if a.max_conversation_tokens:
        head += f", conversations up to {tokens(a.max_conversation_tokens)} tokens"
    return head


def _sentence(a: CapacityAnswer) -> str:
    head = _head(a)
    if a.slo:
        figs = "; ".join(c.text() for c in a.slo)
    else:
        figs = a.figures_text + "; no SLO set (slo: ttft_p95, "
        figs += "decode_tok_s_p50), so nothing is judged"
    parts = [f"{head}: {figs}"]
    phrases: list[str] = []
    for key, buckets, unit, what in (
        ("users", a.by_users, lambda b: f"{b.lo:g}", " users"),
        ("concurrency", a.by_concurrency, lambda b: f"{b.hi:g}", " concurrent requests"),
        ("length", a.by_length, lambda b: tokens(b.hi), " tokens"),
    ):
        if not buckets or not any(b.status in ("MET", "MISSED") for b in buckets):
            if buckets and a.slo:
                a.within[key] = "not enough data"
            continue
        phrase, detail = _within_phrase(buckets, unit, what)
        a.within[key] = detail
        if phrase:
            phrases.append(phrase)
    if phrases:
        listed = ", ".join(phrases[:-1]) + (" and " if len(phrases) > 1 else "") + phrases[-1]
        parts.append("within SLO up to " + listed)
    elif a.slo and any(c.status == "MISSED" for c in a.slo):
        judged = [b for b in a.by_concurrency + a.by_length if b.status != "NOT ENOUGH DATA"]
        if judged:
            parts.append("missed at the lowest load and length measured")
        else:
            parts.append(f"no bucket has {MIN_SAMPLES} requests to say where it broke")
    if a.causes and a.causes[0].can_lead:
        parts.append(f"limited by {a.causes[0].title}")
    return "; ".join(parts)


def first_turn_note(a: CapacityAnswer) -> str | None:
    """What the cold first turns did, apart (they are not in the length buckets)."""
    b = a.first_turns
    if b is None or not b.n:
        return None
    return (
        f"First turns of conversations (cold: {b.n:,} requests) are judged apart: TTFT p95 "
        f"{num(b.ttft_p95)} s, decode p50 {num(b.decode_p50)} tok/s"
        + (f", {b.status}" if b.status in ("MET", "MISSED") else "")
        + "."
    )
