"""The report's capacity section, rendered from the capacity answer.

Everything here is formatting: the answer, its buckets, the working set against the KV
pool and the causes are decided once by :mod:`stress.analysis.capacity` (see its rules),
and this module lays them out as sentences, the capacity chart and tables. The field
notes' central lesson stays the section's spine: eight ~50k-token conversations nearly
fill a 431k-token KV pool, so each user's blocks are evicted before they return, the hit
rate collapses and TTFT climbs.
"""

from __future__ import annotations

from stress.analysis.analyze import Analysis
from stress.analysis.capacity import (
    RETENTION_FLOOR,
    Bucket,
    CapacityAnswer,
    Limits,
    first_turn_note,
)
from stress.analysis.server_kind import PastSlots
from stress.core.fmt import num, pct, times, tokens
from stress.core.limits import MIN_SAMPLES
from stress.report.model import Section, Table


def _ci(ci: tuple[float, float] | None) -> str:
    return f"{num(ci[0])}-{num(ci[1])}" if ci else "-"


def _mark(b: Bucket) -> str:
    if b.status == "MISSED":
        return f"MISSED {times(b.factor)}" if b.factor is not None else "MISSED"
    if b.status == "NOT ENOUGH DATA":
        return f"not enough data (n < {MIN_SAMPLES})"
    return "MET" if b.status == "MET" else "-"


def bucket_table(title: str, axis: str, buckets: list[Bucket], table_id: str) -> Table:
    rows = [
        [
            b.label,
            f"{b.n:,}",
            num(b.ttft_p95),
            _ci(b.ttft_ci),
            num(b.decode_p50),
            _ci(b.decode_ci),
            pct(b.goodput),
            pct(b.cached_share),
            _mark(b),
        ]
        for b in buckets
    ]
    return Table(
        title,
        [
            axis,
            "n",
            "TTFT p95 s",
            "95% interval",
            "decode p50 tok/s",
            "95% interval",
            "goodput",
            "cached",
            "SLO",
        ],
        rows,
        note=f"Intervals: bootstrap 95% of the percentile; buckets under {MIN_SAMPLES} "
        "requests are not judged. Goodput: share of turns answered within the SLO's limits.",
        id=table_id,
    )


def retention_table(a: CapacityAnswer) -> Table:
    axis = "working set, share of the KV pool" if a.pool_tokens else "working set tokens"
    return Table(
        "Cache retention by working set (follow-up turns)",
        [axis, "n", "retention", "TTFT p95 s"],
        [[b.label, f"{b.n:,}", pct(b.retention), num(b.ttft_p95)] for b in a.retention],
        note="Retention = cached / reusable tokens: below 100% means this user's blocks were "
        "evicted between turns. The working set is the sum of every user's live "
        "conversation as the turn started.",
        id="retention-ws",
    )


_WHO = {"users": "users", "sessions": "sessions", "replay": "requests"}
"""What one conversation belongs to, by the run's load (``CapacityAnswer.load``)."""


def slot_levers(a: CapacityAnswer) -> list[str]:
    """llama.cpp: the slots, each its own context, never summed into one pool."""
    slots = a.slots
    assert slots is not None
    out = [slots.sentence() + "; a conversation lives in one slot and cannot use another's room."]
    ctx, longest = slots.context_tokens, a.max_conversation_tokens
    if ctx and longest > ctx:
        out.append(
            f"The longest conversation ({tokens(longest)} tokens) is past a slot's "
            f"{tokens(ctx)}: raise -c (the context is split evenly over --parallel slots)."
        )
    who = _WHO[a.load]
    if a.load != "replay" and a.users > slots.count:
        out.append(
            f"{a.users:,} {who} on {slots.count:,} slots: the others wait for a free slot, "
            "and a slot's cached prompt is replaced by the next conversation's."
        )
    if a.past_slots is not None:
        out.append(host_cache_tier(a.past_slots, slots.count))
    return out


def host_cache_tier(p: PastSlots, slots: int) -> str:
    """The tier below the slots, from the turns that came back after their slot was most
    likely taken (``server_kind.past_slots``), beside the turns whose slot still held them."""
    s = "" if p.turns == 1 else "s"
    kept = (
        f"; the other {p.others:,} follow-up turns kept {pct(p.others_retention)}"
        if p.others and p.others_retention is not None
        else ""
    )
    return (
        f"Below the slots, the host-RAM prompt cache is a tier of its own (--cache-ram, "
        f"8,192 MiB by default; llama.cpp reports neither its size nor its hits): {p.turns:,} "
        f"follow-up turn{s} came back after turns of {slots:,} or more other users, "
        f"their slot most likely taken, and the cache still held {pct(p.retention)} "
        f"of what they could reuse{kept}. Near 0%, the tier is off or too small for these "
        "conversations: each such turn re-reads its whole prompt."
    )


def _pool_levers(a: CapacityAnswer, pool: float) -> list[str]:
    """vLLM, SGLang: the working set against the one shared pool."""
    peak, who = a.peak_working_set, _WHO[a.load]
    needed = peak * 1.1
    held = (
        f"; the pool holds about {a.users_fit_pool:.1f} {who}' conversations at this run's size."
        if a.users_fit_pool is not None and a.load != "replay"
        else "."
    )
    out = [
        f"Peak working set {tokens(peak)} tokens against a KV pool of {tokens(pool)} "
        f"({pct(peak / pool)} of the pool){held}"
    ]
    if needed > pool:
        fit = int(a.users_fit_pool or 0)
        levers = "an fp8 KV cache (about twice the tokens in the same memory), more or larger GPUs"
        if a.load != "replay":
            ceiling = tokens(pool / max(a.users, 1) / 1.1)
            levers += (
                f", at most {fit} {who[:-1] if fit == 1 else who} at this conversation size, "
                f"or a conversation ceiling near {ceiling} tokens each for {a.users} {who}"
            )
        out.append(
            f"To hold all live conversations the pool needs at least {tokens(needed)} "
            f"tokens (peak + 10% for replies and block rounding), {needed / pool:.1f}x "
            f"today's. Levers: {levers}."
        )
    elif peak > 0.8 * pool:
        out.append(
            f"The pool just holds every live conversation, with little headroom: as "
            f"conversations grow past this run's size, {who} will evict each other's "
            "blocks (the field notes' 40% hit rate at 8 x 50k tokens in a 431k pool)."
        )
    else:
        out.append(
            "The pool holds every live conversation with room to spare: cache misses "
            "here are not pool pressure (check prefix caching and the cache mode)."
        )
    return out


def levers(a: CapacityAnswer) -> list[str]:
    """The working set against the pool (llama.cpp: the slots), and what would change
    the answer."""
    out: list[str] = []
    pool, peak, fell = a.pool_tokens, a.peak_working_set, a.retention_fell_at
    if a.slots is not None:
        out += slot_levers(a)
    elif pool:
        out += _pool_levers(a, pool)
    elif a.server_kind == "llamacpp" and peak:
        out.append(
            f"Peak working set {tokens(peak)} tokens; llama.cpp's slots are separate "
            "contexts, not one pool, and the server did not say how many it has "
            "(/props total_slots, /slots)."
        )
    elif peak:
        out.append(
            f"Peak working set {tokens(peak)} tokens; the server did not report its KV pool "
            f"size, so compare it with the pool by hand (a pool of at least "
            f"{tokens(peak * 1.1)} tokens holds every live conversation)."
        )
    why = (
        "more conversations than slots, the prompt cache, or the cache mode"
        if a.slots is not None
        else "prefix caching off, cache mode, or a pool far too small"
    )
    if fell == 0.0:
        out.append(
            f"Cache retention was below {pct(RETENTION_FLOOR)} at every working set seen: "
            f"earlier turns were not found in the cache even with a small working set ({why})."
        )
    elif fell is not None:
        out.append(
            f"Cache retention fell below {pct(RETENTION_FLOOR)} once the working set passed "
            f"~{tokens(fell)} tokens" + (f" ({pct(fell / pool)} of the pool)." if pool else ".")
        )
    return out


def capacity_paragraphs(a: CapacityAnswer) -> list[str]:
    """The answer first, then where each axis stood, goodput, causes and levers."""
    paras = [a.sentence + "."]
    note = first_turn_note(a)
    if note:
        paras.append(note)
    names = {"users": "Users", "concurrency": "Requests in flight", "length": "Length"}
    for key, detail in a.within.items():
        paras.append(f"{names[key]}: {detail}.")
    if a.goodput is not None:
        paras.append(
            f"Goodput: {pct(a.goodput)} of turns were answered within the SLO's limits"
            + (
                f" (per user {pct(min(a.goodput_by_user.values()))} to "
                f"{pct(max(a.goodput_by_user.values()))})."
                if len(a.goodput_by_user) > 1
                else "."
            )
        )
    paras += [c.text for c in a.causes]
    paras += levers(a)
    return paras


def capacity_section(analysis: Analysis, seconds: str = "s", charts: bool = True) -> Section:
    from stress.report.capacity_chart import capacity_chart

    a = analysis.capacity
    tables: list[Table] = []
    if a.by_users:
        tables.append(bucket_table("By users (phase sweep)", "users", a.by_users, "by-users"))
    if a.by_concurrency:
        tables.append(
            bucket_table(
                "By requests in flight ("
                + ("the trace's requests)" if a.load == "replay" else "follow-up turns)"),
                "in flight at start",
                a.by_concurrency,
                "by-concurrency",
            )
        )
    length = ([a.first_turns] if a.first_turns and a.first_turns.n else []) + a.by_length
    if length:
        tables.append(
            bucket_table(
                "By prompt length (the trace's requests)"
                if a.load == "replay"
                else "By conversation length (cold first turns apart)",
                "prompt tokens" if a.load == "replay" else "conversation tokens",
                length,
                "by-length",
            )
        )
    if a.retention:
        tables.append(retention_table(a))
    chart = capacity_chart(a, Limits.of(analysis.run), seconds) if charts else None
    return Section(
        "capacity",
        "Capacity",
        capacity_paragraphs(a),
        tables,
        [chart] if chart is not None else [],
    )
