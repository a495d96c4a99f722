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


def levers(a: CapacityAnswer) -> list[str]:
    """The working set against the pool, and what would change the answer."""
    out: list[str] = []
    pool, peak, fell = a.pool_tokens, a.peak_working_set, a.retention_fell_at
    needed = peak * 1.1
    if pool:
        out.append(
            f"Peak working set {tokens(peak)} tokens against a KV pool of {tokens(pool)} "
            f"({pct(peak / pool)} of the pool)"
            + (
                f"; the pool holds about {a.users_fit_pool:.1f} users' conversations at "
                "this run's size."
                if a.users_fit_pool is not None
                else "."
            )
        )
        if needed > pool:
            fit = int(a.users_fit_pool or 0)
            ceiling = tokens(pool / max(a.users, 1) / 1.1)
            out.append(
                f"To hold all live conversations the pool needs at least {tokens(needed)} "
                f"tokens (peak + 10% for replies and block rounding), {needed / pool:.1f}x "
                f"today's. Levers: an fp8 KV cache (about twice the tokens in the same "
                f"memory), more or larger GPUs, at most {fit} user{'' if fit == 1 else 's'} "
                f"at this conversation size, or a conversation ceiling near {ceiling} "
                f"tokens per user for {a.users} users."
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
                "By requests in flight (follow-up turns)",
                "in flight at start",
                a.by_concurrency,
                "by-concurrency",
            )
        )
    length = ([a.first_turns] if a.first_turns and a.first_turns.n else []) + a.by_length
    if length:
        tables.append(
            bucket_table(
                "By conversation length (cold first turns apart)",
                "conversation tokens",
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
