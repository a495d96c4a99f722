"""Why latency and the cache behaved as they did, named from what the run recorded.

The verdict says what happened (TTFT p95 13 s, hit rate 13 %); the operator's next question
is why, and the field notes list the usual answers: a working set larger than the KV pool
(users evict each other's blocks), more users than llama.cpp slots (one cached prompt per
slot), requests waiting for the server rather than being prefilled, preemptions, other
users' prefill slowing everyone's decode, a load generator that could not keep up, and
telemetry that was missing when it mattered. Each detector here reads only the run
directory (``RunData``) and names its cause only when the run's own numbers show it; a run
without the data for a cause gets nothing said about that cause.

Every cause carries a ``weight`` in 0..1, roughly the share of the loss it explains (the
share of TTFT spent waiting, of reusable tokens the cache lost, of decode speed lost...).
When the run missed its TTFT limit, the loss is the miss: the requests over the limit
(``ttft_miss``), and each TTFT cause's weight is the share of those requests (or of their
TTFT) it accounts for, so a cause that could explain a fraction of a second of a 10 s TTFT
weighs that little. ``name_causes`` puts the heaviest first, so the first cause is the
dominant limit; a cause that explains under ``MIN_EXPLAINED`` of the miss is ``minor`` and
never first; telemetry gaps explain nothing by themselves and always come last, with the
figures they weaken.
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from stress.analysis import figures
from stress.analysis.figures import conv_len
from stress.analysis.itl import server_pauses
from stress.analysis.pauses import Pauses, describe_pauses, frozen_in
from stress.analysis.rundata import Record, RunData, end_time
from stress.analysis.server_kind import server_kind, shared_pool_tokens
from stress.core.fmt import num, pct, tokens

FloatArray = npt.NDArray[np.float64]

CauseCode = Literal[
    "kv_pool",
    "llamacpp_slots",
    "queueing",
    "server_stall",
    "server_pause",
    "prefill",
    "preemption",
    "prefill_interference",
    "client_overload",
    "telemetry_gaps",
]

POOL_PRESSURE = 0.8
"""A working set above this share of the KV pool leaves no room to keep every user's
blocks (the field notes' 8 x 50k tokens in a 431k pool)."""
RETENTION_FLOOR = 0.9
"""Cache retention at or above this: the cache held what users came back to, whatever the
pool or slot count says, so no cache cause is named."""
MIN_REQUESTS = 5
"""Fewest requests behind a median that names a cause."""
MIN_TTFT_S = 1.0
"""A median (or mean) TTFT below this is not a limit worth splitting into causes."""
DOMINANT = 0.5
"""Share of TTFT that makes waiting, or prefill, the cause of it."""
OVERLAP_SHARE = 0.25
"""A stream counts as overlapped when others' prefill covered this share of its decode."""
DECODE_DROP = 0.2
"""Overlapped streams this much slower (median) than clean ones name prefill interference."""
MIN_EXPLAINED = 0.1
"""A cause explaining less than this share of a TTFT miss is minor: never the first limit."""
GAP_SHARE = 0.05
"""Failed (or late) telemetry requests at or above this share are a gap worth naming."""


@dataclass(frozen=True, slots=True)
class Cause:
    """One named reason, with its numbers."""

    code: CauseCode
    title: str
    """A short phrase that reads after "limited by ..."."""
    text: str
    """One or two sentences with the figures that show it."""
    weight: float
    """0..1, about the share of the loss it explains; the heaviest is the dominant limit."""
    weakens: tuple[str, ...] = ()
    """For telemetry gaps: the figures the missing samples weaken."""
    minor: bool = False
    """It explains under ``MIN_EXPLAINED`` of the TTFT miss: said, never the first limit."""

    @property
    def can_lead(self) -> bool:
        """Whether this cause may be named as the run's limit ("limited by ...")."""
        return not self.minor and self.code != "telemetry_gaps"


@dataclass(frozen=True, slots=True)
class Miss:
    """What a TTFT cause has to explain: the requests whose TTFT was over the limit."""

    limit: float
    requests: list[Record]
    ttft_median: float


def ttft_miss(run: RunData) -> Miss | None:
    """The requests over the scenario's TTFT limit (non-warm-up, text generated); None
    without a limit or with fewer than ``MIN_REQUESTS`` over it."""
    limit = run.manifest.slo.get("ttft_p95")
    if not isinstance(limit, int | float) or limit <= 0:
        return None
    over = [
        r
        for r in run.main
        if r.get("outcome") in figures.GENERATED and float(r.get("ttft_s") or 0.0) > limit
    ]
    if len(over) < MIN_REQUESTS:
        return None
    return Miss(float(limit), over, _median([float(r.get("ttft_s") or 0.0) for r in over]))


DECODE_ONLY = frozenset({"prefill_interference"})
"""Causes that slow decoding and add nothing to TTFT: their weight is the decode lost, so
against a TTFT miss with the decode SLO met (or unset) they explain none of it."""


def decode_miss(run: RunData) -> bool:
    """Whether the run missed its decode floor (``slo.decode_tok_s_p50``, on decode p50)."""
    floor = run.manifest.slo.get("decode_tok_s_p50")
    if not isinstance(floor, int | float) or floor <= 0:
        return False
    p50 = figures.decode_p50(run.requests)
    return p50 is not None and p50 < floor


def name_causes(run: RunData) -> list[Cause]:
    """The causes the run's data shows, the dominant limit first; empty when none. With a
    TTFT miss, the causes that explain under ``MIN_EXPLAINED`` of it, and the decode-only
    ones while decode met its floor, follow the others, marked minor."""
    miss = ttft_miss(run)
    found = [
        c
        for c in (
            *_cache_causes(run, miss),
            _ttft_cause(run, miss),
            server_pause(run, miss),
            preemption(run, miss),
            prefill_interference(run),
            client_overload(run, miss),
        )
        if c is not None
    ]
    if miss is not None:
        decode_missed = decode_miss(run)
        found = [
            replace(
                c, minor=c.weight < MIN_EXPLAINED or (c.code in DECODE_ONLY and not decode_missed)
            )
            for c in found
        ]
    found.sort(key=lambda c: (c.minor, -c.weight))
    gaps = telemetry_gaps(run)
    return found + ([gaps] if gaps is not None else [])


# --- the working set ----------------------------------------------------------------


def working_set(records: list[Record], finished_stay: bool = True) -> tuple[FloatArray, FloatArray]:
    """Step function (times, tokens): sum over users of their live conversation length.

    A user's conversation is its prompt while a request runs, plus the reply once it ends;
    a new conversation (past the ceiling) replaces the old one. With ``finished_stay``
    false (single turns that never come back), a request is live only while it runs.
    """
    changes: list[tuple[float, int, float]] = []
    for r in records:
        user = int(r.get("user") or 0)
        size = conv_len(r)
        changes.append((float(r.get("t_start") or 0.0), user, size))
        if not finished_stay:
            changes.append((end_time(r), user, 0.0))
        elif r.get("outcome") != "error":
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


def run_working_set(run: RunData) -> tuple[FloatArray, FloatArray]:
    """The run's working set (``working_set``), the one every output reads: a replay's
    requests are single turns of a trace (request i is user i) that never come back, so
    each holds its conversation only while it runs; summed for good, a replay of 1,000
    requests would read as 1,000 conversations held at once."""
    return working_set(run.requests, finished_stay=not run.scenario.get("replay"))


# --- cache: KV pool and llama.cpp slots ---------------------------------------------


def _probe(run: RunData) -> Mapping[str, Any]:
    return run.manifest.probe


def _cache_causes(run: RunData, miss: Miss | None) -> list[Cause | None]:
    slots = llamacpp_slots(run, miss)
    # On llama.cpp the "pool" is the slots' contexts: with too few slots that is the cause,
    # and the same lost retention is not named twice.
    return [slots] if slots is not None else [kv_pool(run, miss)]


def _lost_prefix(r: Record) -> bool:
    """The request could have reused a prefix and the cache kept under
    ``RETENTION_FLOOR`` of it (it was prefilled again)."""
    kept, could = float(r.get("cached_tokens") or 0), float(r.get("reusable_tokens") or 0)
    return figures.counts_for_retention(r) and kept < RETENTION_FLOOR * could


def _miss_share(miss: Miss, hit: Callable[[Record], bool], what: str) -> tuple[float, str]:
    """The share of the miss's requests ``hit`` accepts, and a clause saying so."""
    n = sum(1 for r in miss.requests if hit(r))
    share = n / len(miss.requests)
    return share, (
        f"; {n:,} of the {len(miss.requests):,} requests over the {num(miss.limit)} s TTFT "
        f"limit ({pct(share)}) {what}"
    )


def kv_pool(run: RunData, miss: Miss | None = None) -> Cause | None:
    """The working set (sum of live conversations) fills the KV pool and the cache lost
    what users came back to. Needs the pool (server samples, the collector's summary or
    the probe: ``figures.kv_pool_tokens``) and the requests' conversation sizes.

    Judged on the whole run and on the requests sent while the working set was above
    ``POOL_PRESSURE`` of the pool (a cache can hold while the pool has room and lose
    everything past it). With a TTFT miss, its weight is the share of the requests over
    the limit that were sent at that pressure and prefilled their lost prefix again."""
    pool = shared_pool_tokens(run)
    times, sums = run_working_set(run)
    if not pool or not sums.size or float(sums.max()) < POOL_PRESSURE * pool:
        return None
    peak = float(sums.max())

    def pressed(r: Record) -> bool:
        i = int(np.searchsorted(times, float(r.get("t_start") or 0.0), side="right")) - 1
        return i >= 0 and float(sums[i]) >= POOL_PRESSURE * pool

    retention = figures.cache_retention(run.main)
    under = figures.cache_retention([r for r in run.main if pressed(r)])
    lost = [x for x in (retention, under) if x is not None and x < RETENTION_FLOOR]
    if not lost and (retention is not None or under is not None):
        return None
    loss = (
        f"cache retention {pct(retention)} of reusable tokens"
        if retention is not None
        else "cache retention not measured (no cached-token counts)"
    )
    if under is not None and retention is not None and under < retention:
        loss += f", {pct(under)} in requests sent with the pool over {pct(POOL_PRESSURE)} full"
    if isinstance(hit := run.collector("server").get("hit_rate_run"), int | float):
        loss += f", server hit rate {pct(hit)}"
    weight = 1.0 - lost[0] if lost else 0.5
    if miss is not None:
        weight, said = _miss_share(
            miss,
            lambda r: pressed(r) and _lost_prefix(r),
            "were sent at that pressure and prefilled their lost prefix again",
        )
        loss += said
    return Cause(
        "kv_pool",
        "a KV pool smaller than the working set" if peak > pool else "a nearly full KV pool",
        f"Peak working set {tokens(peak)} tokens against a KV pool of {tokens(pool)} "
        f"({pct(peak / pool)} of it): users evict each other's cached blocks before they "
        f"return; {loss}.",
        weight,
    )


def _retention_by_round(records: Iterable[Record]) -> list[tuple[int, float]]:
    rounds: dict[int, list[Record]] = {}
    for r in records:
        if r.get("round") is not None:
            rounds.setdefault(int(r["round"]), []).append(r)
    out = []
    for rnd in sorted(rounds):
        ret = figures.cache_retention(rounds[rnd])
        if ret is not None:
            out.append((rnd, ret))
    return out


def _collapse_text(by_round: list[tuple[int, float]]) -> str:
    """Retention of the first rounds and where it stayed near zero, e.g.
    '38.0% → 13.0% → 0.0% (rounds 2-4), under 5.0% from round 4 on'."""
    shown = by_round[:4]
    text = " → ".join(pct(v) for _, v in shown)
    text += f" (rounds {shown[0][0]}-{shown[-1][0]})" if len(shown) > 1 else ""
    low = None
    for rnd, v in reversed(by_round):
        if v >= 0.05:
            break
        low = rnd
    if low is not None and low != by_round[0][0]:
        text += f", under {pct(0.05)} from round {low} on"
    return text


def llamacpp_slots(run: RunData, miss: Miss | None = None) -> Cause | None:
    """More users than llama.cpp slots: each slot keeps one prompt, so a user's next turn
    finds its slot holding someone else's. Needs the probe's slot count (manifest) and the
    users in the requests; not named when the cache kept what users came back to."""
    probe = _probe(run)
    slots = probe.get("slots")
    if server_kind(run) != "llamacpp" or not isinstance(slots, int) or slots <= 0:
        return None
    users = run.peak_users
    retention = figures.cache_retention(run.main)
    if users <= slots or (retention is not None and retention >= RETENTION_FLOOR):
        return None
    text = (
        f"{users} users on {slots} llama.cpp slots: a slot keeps one conversation's prompt, "
        "so a returning user finds its slot holding another's and re-reads everything"
    )
    by_round = _retention_by_round(run.main)
    if by_round:
        text += f"; cache retention by round {_collapse_text(by_round)}"
    weight = 1.0 - retention if retention is not None else 1.0 - slots / users
    if miss is not None:
        weight, said = _miss_share(miss, _lost_prefix, "found their prefix gone from the slot")
        text += said
    text += f". Fix: --parallel {users} (with -c raised to match), or at most {slots} users."
    return Cause("llamacpp_slots", "more users than llama.cpp slots", text, weight)


# --- TTFT: waiting vs prefill -------------------------------------------------------


def _median(values: list[float]) -> float:
    return float(np.median(np.asarray(values, dtype=float)))


def _prompt_s(r: Record) -> float | None:
    t = r.get("server_timings")
    ms = t.get("prompt_ms") if isinstance(t, dict) else None
    return float(ms) / 1000.0 if isinstance(ms, int | float) and ms >= 0 else None


def _ttft_cause(run: RunData, miss: Miss | None = None) -> Cause | None:
    """Waiting or prefill, from llama.cpp's per-request timings where the records carry
    them (of the requests over the TTFT limit when the run missed it), else from the
    server's own histograms (vLLM, SGLang)."""
    timed = [
        r
        for r in (miss.requests if miss is not None else run.main)
        if r.get("outcome") in figures.GENERATED
        and r.get("ttft_s") is not None
        and _prompt_s(r) is not None
    ]
    if len(timed) < MIN_REQUESTS:
        return _histogram_ttft(run) or (_batch_wait(run, miss) if miss is not None else None)
    over = f" over the {num(miss.limit)} s TTFT limit" if miss is not None else ""
    return _llamacpp_ttft(
        run, timed, f"(llama.cpp timings.prompt_ms, {len(timed):,} requests{over})"
    )


def _slot_shortage(run: RunData) -> bool | None:
    """Whether requests could have waited for a llama.cpp slot: more users than the probe's
    slots, or the server reported requests deferred (``llamacpp:requests_deferred``).
    False when the slots sufficed and the server queued none; None when unknown."""
    slots = _probe(run).get("slots")
    waiting = run.collector("server").get("waiting_max")
    if isinstance(waiting, int | float) and waiting > 0:
        return True
    if isinstance(slots, int) and slots > 0:
        if run.peak_users > slots:
            return True
        if isinstance(waiting, int | float):
            return False
    return None


def _waits(
    run: RunData, recs: list[Record], prefill: list[float]
) -> tuple[list[float], list[float]]:
    """Each request's wait before prefill (TTFT minus prefill), less the part of its TTFT
    that fell in a server-wide pause (``stress.analysis.pauses``): that time every stream
    was held, which no free slot would have saved. Also each request's paused seconds
    (empty when no pause was found)."""
    found = server_pauses(run).pauses
    waits, paused = [], []
    for r, p in zip(recs, prefill, strict=True):
        t, start = float(r.get("ttft_s") or 0.0), float(r.get("t_start") or 0.0)
        held = frozen_in(found, start, start + t) if found else 0.0
        waits.append(max(0.0, t - p - held))
        paused.append(held)
    return waits, (paused if any(paused) else [])


def _llamacpp_ttft(run: RunData, recs: list[Record], where: str) -> Cause | None:
    """llama.cpp: each reply's ``timings.prompt_ms`` is its prefill, so TTFT minus it is
    the time before prefill started; medians of each. That wait is a free slot's only when
    there were too few slots (or the server deferred requests): with a slot per user and
    nothing queued, the server itself held the requests (e.g. llama.cpp's host-RAM prompt
    cache copying idle slots' KV on each request start, --cache-ram)."""
    prefill = [_prompt_s(r) or 0.0 for r in recs]
    ttft_all = [float(r.get("ttft_s") or 0.0) for r in recs]  # callers keep those with one
    ttft = _median(ttft_all)
    waits, paused = _waits(run, recs, prefill)
    wait = _median(waits)
    pre = _median(prefill)
    if ttft < MIN_TTFT_S:
        return None
    if wait >= DOMINANT * ttft:
        head = f"Median TTFT {num(ttft)} s is {num(wait)} s of waiting before prefill started"
        if paused:
            head += (
                f" (server-wide pauses apart: {num(sum(paused))} s of these requests' TTFT "
                "fell in them, named as their own cause)"
            )
        shortage = _slot_shortage(run)
        if shortage is False:
            slots = _probe(run).get("slots")
            return Cause(
                "server_stall",
                "the server holding requests before prefill (slots were free)",
                f"{head} over {num(pre)} s of prefill {where}, with {run.peak_users} users on "
                f"{slots} slots and no request deferred by the server: not a slot shortage. "
                "llama.cpp's host-RAM prompt cache does this (it copies idle slots' KV cache "
                "on each request start): try --cache-ram 0.",
                min(1.0, wait / ttft),
            )
        why = "for a free slot" if shortage else "for a free slot, or a server stall"
        return Cause(
            "queueing",
            "waiting for a free slot",
            f"{head} ({why}) over {num(pre)} s of prefill {where}.",
            min(1.0, wait / ttft),
        )
    if pre < DOMINANT * ttft:
        return None
    sized = [
        (float(n), p)
        for r, p in zip(recs, prefill, strict=True)
        if isinstance(n := (r.get("server_timings") or {}).get("prompt_n"), int | float)
    ]
    size = ""
    if sized:
        seconds = sum(p for _, p in sized)
        size = f": a median {tokens(_median([n for n, _ in sized]))} uncached prompt tokens"
        size += " per request"
        if seconds > 0:
            size += f" at {num(sum(n for n, _ in sized) / seconds)} tok/s"
    return Cause(
        "prefill",
        "prefill (prompt processing)",
        f"Median TTFT {num(ttft)} s is {num(pre)} s of prefill over {num(wait)} s of "
        f"waiting {where}{size}.",
        min(1.0, pre / ttft),
    )


def _server_mean(run: RunData, histogram: str) -> float | None:
    """Mean seconds per request of a server histogram (``queue_time``, ``prefill_time``):
    the collector's summary, else its recorded sum and count deltas (a killed run)."""
    got = run.collector("server").get(f"{histogram}_s_mean")
    if isinstance(got, int | float):
        return float(got)
    total = n = 0.0
    for rec in run.server:
        d = rec.get("deltas") or {}
        total += float(d.get(f"{histogram}_s") or 0.0)
        n += float(d.get(f"{histogram}_n") or 0.0)
    return total / n if n else None


def _histogram_ttft(run: RunData) -> Cause | None:
    """vLLM (queue and prefill time) and SGLang (queue time): the server's own per-request
    histograms, as means, against the client's mean TTFT."""
    queue, prefill = _server_mean(run, "queue_time"), _server_mean(run, "prefill_time")
    ttfts = figures.generated_values(run.main, "ttft_s")
    if (queue is None and prefill is None) or len(ttfts) < MIN_REQUESTS:
        return None
    ttft = sum(ttfts) / len(ttfts)
    if ttft < MIN_TTFT_S:
        return None
    kind = server_kind(run) or "server"
    parts = [f"{num(queue)} s queued before scheduling"] if queue is not None else []
    parts += [f"{num(prefill)} s of prefill"] if prefill is not None else []
    text = (
        f"Mean TTFT {num(ttft)} s ({len(ttfts):,} requests) against the {kind} server's own "
        f"means per request: {' and '.join(parts)}"
    )
    if queue is not None and queue >= DOMINANT * ttft:
        return Cause(
            "queueing",
            "server queueing",
            text + ": requests wait for room in the running batch.",
            min(1.0, queue / ttft),
        )
    if prefill is not None and prefill >= DOMINANT * ttft:
        return Cause("prefill", "prefill (prompt processing)", text + ".", min(1.0, prefill / ttft))
    return None


def _waiting_windows(run: RunData) -> tuple[list[tuple[float, float]], float]:
    """The scrape intervals (previous sample, sample] at whose either end the server
    reported requests waiting, and the most it reported running at once."""
    out: list[tuple[float, float]] = []
    prev: tuple[float, float] | None = None
    running = 0.0
    for rec in run.server:
        t, waiting = rec.get("t"), rec.get("waiting")
        if not isinstance(t, int | float) or not isinstance(waiting, int | float):
            continue
        if isinstance(r := rec.get("running"), int | float):
            running = max(running, float(r))
        if prev is not None and (waiting > 0 or prev[1] > 0):
            out.append((prev[0], float(t)))
        prev = (float(t), float(waiting))
    return out, running


def _batch_wait(run: RunData, miss: Miss) -> Cause | None:
    """vLLM / SGLang without queue-time histograms to split a TTFT miss (or a TTFT too
    short for them): the share of the requests over the limit that waited for their first
    token while the server's own gauge said requests were waiting for room in the running
    batch (``num_requests_waiting``, between scrapes). Named when that share is
    ``DOMINANT``; the fix is the batch's bound (max_num_seqs, max_running_requests) or
    fewer users."""
    windows, running = _waiting_windows(run)
    if not windows:
        return None
    union = _Union(windows)

    def waited(r: Record) -> bool:
        start = float(r.get("t_start") or 0.0)
        return union.overlap(start, start + float(r.get("ttft_s") or 0.0)) > 0

    share, said = _miss_share(miss, waited, "waited while the server held requests waiting")
    if share < DOMINANT:
        return None
    peak = f" (at most {running:.0f} running at once)" if running else ""
    kind = _DIALECT_NAMES.get(server_kind(run) or "", "the server")
    return Cause(
        "queueing",
        "waiting for room in the running batch",
        f"The {kind} server reported requests waiting for a place in its running batch"
        f"{peak}{said}: they queue behind the running ones; fix: a larger batch bound "
        "(vLLM --max-num-seqs, SGLang --max-running-requests) if the KV pool has room, or "
        "fewer users.",
        share,
    )


# --- server-wide pauses ---------------------------------------------------------------

_PAUSE_LIKELY = {
    "llamacpp": (
        "Likely llama.cpp's host-RAM prompt cache: at a slot start the server copies the "
        "slot's old prompt out (--cache-ram, 8 GiB by default) and every slot waits; try "
        "--cache-ram 0"
    ),
}


def _frozen_mid_stream(r: Record, p: Pauses) -> bool:
    """Whether a pause fell between the request's first token and its end."""
    ttft = r.get("ttft_s")
    if ttft is None:
        return False
    first = float(r.get("t_start") or 0.0) + float(ttft)
    return frozen_in(p.pauses, first, end_time(r)) > 0


def _pause_ttft(p: Pauses, miss: Miss) -> tuple[float, str]:
    """With a TTFT miss: the share of the TTFT of the requests over the limit that fell in
    pauses, and a clause saying how many waited for a first token across one."""
    held = []
    for r in miss.requests:
        start = float(r.get("t_start") or 0.0)
        held.append(frozen_in(p.pauses, start, start + float(r.get("ttft_s") or 0.0)))
    total = sum(float(r.get("ttft_s") or 0.0) for r in miss.requests)
    share = min(1.0, sum(held) / total) if total > 0 else 0.0
    n = sum(1 for h in held if h > 0)
    return share, (
        f"; {n:,} of the {len(miss.requests):,} requests over the {num(miss.limit)} s TTFT "
        f"limit waited for their first token across a pause ({num(sum(held))} s of their "
        f"{num(total)} s of TTFT, {pct(share)})"
    )


def server_pause(run: RunData, miss: Miss | None = None) -> Cause | None:
    """Server-wide pauses (``stress.analysis.pauses``): every running stream silent at
    once, from ``tokens.bin``. They explain the decode silences (weight: the share of the
    streams' running time they froze) and, with a TTFT miss, the TTFT of requests that
    waited for a first token across one (weight: the share of the missing requests' TTFT
    spent in pauses). The usual cause is named per dialect only where it is known."""
    p = server_pauses(run)
    if not p.pauses:
        return None
    stuck = sum(1 for r in run.main if _frozen_mid_stream(r, p))
    text = f"{describe_pauses(p)}; {stuck:,} of {len(run.main):,} requests froze mid-stream"
    if p.decode_share is not None:
        text += f", {pct(p.decode_share)} of the streams' time between first and last chunk"
    weight = p.decode_share or 0.0
    if miss is not None:
        weight, said = _pause_ttft(p, miss)
        text += said
    first = ", ".join(f"{num(x.start)} s" for x in p.pauses[:3])
    text += f". First at {first} into the run. "
    kind = server_kind(run)
    text += _PAUSE_LIKELY.get(
        kind or "",
        "A server-wide pause: stress knows no usual cause for it on "
        f"{_DIALECT_NAMES.get(kind or '', 'this server')}; its log at those times may say",
    )
    return Cause("server_pause", "server-wide pauses", text + ".", weight)


_DIALECT_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp"}


# --- preemptions ----------------------------------------------------------------------


def _preempted_windows(run: RunData) -> list[tuple[float, float]]:
    """The scrape intervals (previous sample, sample] in which the server preempted."""
    out = []
    prev = None
    for rec in run.server:
        t = rec.get("t")
        if not isinstance(t, int | float):
            continue
        if prev is not None and float((rec.get("deltas") or {}).get("preemptions") or 0) > 0:
            out.append((prev, float(t)))
        prev = float(t)
    return out


def _preemption_weight(run: RunData, count: float, miss: Miss | None) -> tuple[float, str]:
    """Without a miss: preemptions per request. With one: the share of the requests over
    the limit that waited for a first token while the server preempted (the scrape
    windows), else (no per-window counts) preemptions per request over the limit."""
    n = len(run.main)
    if miss is None:
        return (min(1.0, count / n) if n else 1.0), ""
    windows = _Union(_preempted_windows(run))
    if windows.starts:
        return _miss_share(
            miss,
            lambda r: (
                windows.overlap(
                    float(r.get("t_start") or 0.0),
                    float(r.get("t_start") or 0.0) + float(r.get("ttft_s") or 0.0),
                )
                > 0
            ),
            "waited for their first token while the server preempted",
        )
    return min(1.0, count / len(miss.requests)), ""


def preemption(run: RunData, miss: Miss | None = None) -> Cause | None:
    """The server preempted (vLLM) or retracted (SGLang) running requests: its pool ran
    out mid-request. Needs the server collector's summary or its recorded deltas."""
    summary = run.collector("server")
    count = summary.get("preemptions")
    if not isinstance(count, int | float):
        count = sum(float((rec.get("deltas") or {}).get("preemptions") or 0) for rec in run.server)
    if count <= 0:
        return None
    verb = "retracted" if server_kind(run) == "sglang" else "preempted"
    rate = summary.get("preemptions_per_min")
    if not isinstance(rate, int | float) and run.duration_s > 0:
        rate = count * 60.0 / run.duration_s
    ttft = figures.percentile(figures.generated_values(run.main, "ttft_s"), 50)
    errors = sum(1 for r in run.main if r.get("outcome") == "error")
    text = f"The server {verb} running requests {count:,.0f} times" + (
        f" ({num(rate)} a minute)" if isinstance(rate, int | float) else ""
    )
    text += (
        ": its KV pool ran out mid-request, and each one waits and is prefilled again"
        + (f"; median TTFT {num(ttft)} s" if ttft is not None else "")
        + (" with zero errors" if not errors and ttft is not None else "")
    )
    weight, said = _preemption_weight(run, count, miss)
    return Cause("preemption", "KV-cache preemptions", text + said + ".", weight)


# --- prefill interference on decode -------------------------------------------------


class _Union:
    """The union of time intervals, to measure how much of a window it covers."""

    def __init__(self, intervals: Iterable[tuple[float, float]]) -> None:
        merged: list[list[float]] = []
        for a, b in sorted(i for i in intervals if i[1] > i[0]):
            if merged and a <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], b)
            else:
                merged.append([a, b])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self.before = [0.0]
        for a, b in merged:
            self.before.append(self.before[-1] + b - a)

    def _covered(self, x: float) -> float:
        i = bisect.bisect_right(self.starts, x) - 1
        if i < 0:
            return 0.0
        return self.before[i] + min(x, self.ends[i]) - self.starts[i]

    def overlap(self, a: float, b: float) -> float:
        return self._covered(b) - self._covered(a)


def prefill_interference(run: RunData) -> Cause | None:
    """Decode of streams that overlapped others' prefill against streams that did not.

    Sound only where each request's prefill window is known: llama.cpp's
    ``timings.prompt_ms`` places it just before the first token. vLLM and SGLang report no
    per-request prefill time, and a TTFT window would count queueing as prefill, so they
    get nothing here. The comparison is not controlled for concurrency: overlapped streams
    also ran beside more users, which the text does not hide (both medians and counts).
    """
    windows = []
    for r in run.requests:
        p = _prompt_s(r)
        if p is not None and (ttft := r.get("ttft_s")) is not None:
            first = float(r.get("t_start") or 0.0) + float(ttft)
            windows.append((first - p, first))
    if not windows:
        return None
    prefills = _Union(windows)
    overlapped: list[float] = []
    clean: list[float] = []
    for r in run.main:
        decode, ttft = r.get("decode_tok_s"), r.get("ttft_s")
        if r.get("outcome") not in figures.GENERATED or decode is None or ttft is None:
            continue
        a = float(r.get("t_start") or 0.0) + float(ttft)
        b = end_time(r)
        if b <= a:
            continue
        share = prefills.overlap(a, b) / (b - a)
        if share >= OVERLAP_SHARE:
            overlapped.append(float(decode))
        elif share <= 0.0:
            clean.append(float(decode))
    if len(overlapped) < MIN_REQUESTS or len(clean) < MIN_REQUESTS:
        return None
    hit, free = _median(overlapped), _median(clean)
    if free <= 0 or hit > (1.0 - DECODE_DROP) * free:
        return None
    return Cause(
        "prefill_interference",
        "other users' prefill slowing decode",
        f"Median decode {num(hit)} tok/s in streams whose decode overlapped others' prefill "
        f"for at least {pct(OVERLAP_SHARE)} of it ({len(overlapped):,} requests), against "
        f"{num(free)} tok/s with no overlap ({len(clean):,}): pasted prompts share the "
        "server's steps with decoding streams; this is waiting, not a long-context slowdown.",
        1.0 - hit / free,
    )


# --- the client -------------------------------------------------------------------------

_CLIENT = {
    "stress": (
        "an overloaded load generator",
        "stress itself was near a full core: latencies include the client's own delay; "
        "fix: fewer users per stress process",
    ),
    "machine": (
        "a busy client machine",
        "other processes kept the client machine's CPUs busy: latencies include stress "
        "waiting for a CPU; fix: run stress on an idle machine",
    ),
    "loop": (
        "a blocked client event loop",
        "stress's event loop was blocked with little CPU in use (a blocking call): "
        "latencies include that delay; please report it with client.jsonl",
    ),
}


def client_overload(run: RunData, miss: Miss | None = None) -> Cause | None:
    """stress's own event loop lagged (``client_overloaded`` events, the client collector's
    summary): its cause as the collector named it, and for how much of the run.

    With a TTFT miss it can explain at most its largest lag of each request's TTFT: its
    weight is then at most that lag over the median TTFT of the requests over the limit."""
    summary = run.collector("client")
    events = [e for e in run.events if e.get("kind") == "client_overloaded"]
    if not events and not summary.get("warnings"):
        return None
    cause = summary.get("overload_cause")
    if cause not in _CLIENT:
        seen = Counter(str((e.get("data") or {}).get("cause")) for e in events)
        cause = next((c for c, _ in seen.most_common() if c in _CLIENT), "stress")
    title, why = _CLIENT[str(cause)]
    samples, bad = summary.get("samples"), summary.get("overloaded_samples")
    lag = summary.get("loop_lag_ms_max")
    if isinstance(samples, int) and samples > 0 and isinstance(bad, int):
        share = bad / samples
        extent = f"in {bad:,} of {samples:,} client samples ({pct(share)})"
    else:  # a killed run: the warnings, at most one a minute, bound it from below
        share = min(1.0, len(events) * 60.0 / max(run.duration_s, 60.0))
        extent = f"{len(events):,} warning{'s' if len(events) != 1 else ''}"
    lag_text = f", event-loop lag up to {num(lag)} ms" if isinstance(lag, int | float) else ""
    bound = ""
    if miss is not None and isinstance(lag, int | float):
        share = min(share, lag / 1000.0 / miss.ttft_median)
        bound = (
            f" It can explain at most {num(lag / 1000.0)} s of the median "
            f"{num(miss.ttft_median)} s TTFT of the {len(miss.requests):,} requests over the "
            f"{num(miss.limit)} s limit."
        )
    return Cause(
        "client_overload", title, f"The client lagged {extent}{lag_text}: {why}.{bound}", share
    )


# --- telemetry gaps -------------------------------------------------------------------

_METRICS_WEAKENS = ("hit rate by window", "preemptions by window", "queueing", "KV usage")
_SLOTS_WEAKENS = ("KV usage (llama.cpp /slots estimate)", "busy slots")


def _scrape_counts(run: RunData) -> dict[str, int]:
    """Requests and failures of /metrics and /slots: the collector's summary, else counted
    from server.jsonl (a killed run)."""
    s = run.collector("server")
    keys = ("scrapes", "scrape_errors", "slots_requests", "slots_errors", "late_ticks")
    if isinstance(s.get("scrapes"), int):
        return {k: int(s.get(k) or 0) for k in keys}
    recs = run.server
    return {
        "scrapes": len(recs),
        "scrape_errors": sum(1 for r in recs if r.get("error")),
        "slots_requests": sum(1 for r in recs if "slots" in r or "slots_error" in r),
        "slots_errors": sum(1 for r in recs if r.get("slots_error")),
        "late_ticks": 0,
    }


def telemetry_gaps(run: RunData) -> Cause | None:
    """Failed /metrics and /slots requests (a busy llama.cpp answers them behind inference)
    and late scrapes: how many, and which figures they weaken. Run totals come from
    cumulative counters and stay exact; what falls in the gaps is per-window figures."""
    c = _scrape_counts(run)
    scrapes, m_err = c["scrapes"], c["scrape_errors"]
    s_req, s_err, late = c["slots_requests"], c["slots_errors"], c["late_ticks"]
    asked = scrapes + s_req
    if not asked:
        return None
    failed = m_err + s_err
    share = failed / asked
    late_share = late / scrapes if scrapes else 0.0
    if share < GAP_SHARE and late_share < GAP_SHARE:
        return None
    if scrapes and m_err == scrapes and not run.collector("server").get("metrics_available"):
        return Cause(
            "telemetry_gaps",
            "no server metrics",
            f"/metrics never answered ({scrapes:,} scrapes): this run has no server hit "
            "rate, KV usage, preemptions or queue times.",
            1.0,
            ("server hit rate", "KV usage", "preemptions", "queueing"),
        )
    parts = [f"{m_err:,} of {scrapes:,} /metrics"]
    parts += [f"{s_err:,} of {s_req:,} /slots"] if s_req else []
    weakens = (_METRICS_WEAKENS if m_err else ()) + (_SLOTS_WEAKENS if s_err else ())
    text = f"{failed:,} of {asked:,} telemetry requests failed ({', '.join(parts)})"
    if late:
        text += f"; {late:,} scrape deadlines were missed (scrapes ran late)"
        weakens = weakens or _METRICS_WEAKENS
    text += (
        ": a busy server answers them behind inference. Weakened: "
        + ", ".join(weakens)
        + "; run totals come from cumulative counters and stay exact."
    )
    return Cause("telemetry_gaps", "missed telemetry", text, max(share, late_share), weakens)
