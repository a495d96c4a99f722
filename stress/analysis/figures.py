"""Each figure that several outputs show, defined once: its population and its formula.

``summary.json``, the report (verdict, headline, tables, capacity, GPU table), ``stress ls``
and the live view used to compute these each on their own, and disagreed (a verdict's
TTFT p95 over failed requests too, a live retention above 100 %, J/token over every card,
a KV pool the probe found but the report did not). Every one of them now calls the
function here. Pure functions over record dicts and numbers: no UI, no plotting.

A figure is one function registered with ``@figure(name)``, its docstring's
``Population:`` and ``Formula:`` paragraphs its definition; a figure measured elsewhere
(while a reply is read, from tokens.bin, by a collector) is a ``FigureDef`` whose ``where``
names that function. ``FIGURES`` orders both for the report and docs/metrics.md;
``tests/analysis/test_figure_registry.py`` checks the registry and scans the outputs for a
figure computed outside it.
"""

from __future__ import annotations

import inspect
import math
import statistics
import sys
from array import array
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, TypeVar

Record = Mapping[str, Any]


F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class FigureDef:
    """One figure: its name, which requests (or samples) count, its formula, and where
    (``module:function``) it is computed."""

    name: str
    population: str
    formula: str
    where: str = ""


_REGISTRY: dict[str, FigureDef] = {}
_BY_FUNCTION: dict[Callable[..., Any], FigureDef] = {}
REGISTRY: Mapping[str, FigureDef] = MappingProxyType(_REGISTRY)
"""Every figure a function here computes, by name, in the order registered."""


def figure(name: str) -> Callable[[F], F]:
    """Register the decorated function as the figure ``name``: its docstring's
    ``Population:`` and ``Formula:`` paragraphs are its definition (whitespace collapsed,
    a final full stop dropped), shown in the report and docs/metrics.md."""

    def register(fn: F) -> F:
        if name in _REGISTRY:
            raise ValueError(f"figure {name!r} is registered twice")
        d = FigureDef(
            name,
            _paragraph(fn, "Population:"),
            _paragraph(fn, "Formula:"),
            f"{fn.__module__}:{fn.__qualname__}",
        )
        _REGISTRY[name] = _BY_FUNCTION[fn] = d
        return fn

    return register


def _paragraph(fn: Callable[..., Any], label: str) -> str:
    """The text of the docstring paragraph that starts with ``label``."""
    if fn.__doc__ is None and sys.flags.optimize >= 2:
        return ""  # python -OO strips docstrings: no definitions to show, nothing broken
    for para in inspect.cleandoc(fn.__doc__ or "").split("\n\n"):
        if para.startswith(label):
            return " ".join(para[len(label) :].split()).removesuffix(".")
    raise ValueError(f"{fn.__qualname__}: its docstring has no {label!r} paragraph")


def defined(fn: Callable[..., Any]) -> FigureDef:
    """The definition a registered function carries."""
    return _BY_FUNCTION[fn]


GENERATED = ("ok", "reasoning_only")
"""Outcomes of requests that generated text: the population of latency and speed figures
(a failed request has no meaningful TTFT, even one that failed after its first token)."""
ANSWERED = ("ok",)
"""Outcomes that count as answered: a reply that reasoned and stopped without answer text
measured the server's speed but answered nothing."""


def main_requests(records: Iterable[Record]) -> list[Record]:
    """Population of every headline figure: the run's requests minus warm-up ones."""
    return [r for r in records if not r.get("warmup")]


def generated_values(records: Iterable[Record], key: str) -> list[float]:
    """A per-request figure (``ttft_s``, ``decode_tok_s``, ...) over the requests of
    ``records`` that generated text (outcome in ``GENERATED``); missing values skipped.

    Callers pass non-warm-up requests (``main_requests``) for headline figures."""
    return [
        float(r[key]) for r in records if r.get(key) is not None and r.get("outcome") in GENERATED
    ]


def generated_users(records: Iterable[Record], key: str) -> list[Any]:
    """Each ``generated_values`` value's user, in the same order: the clusters of its
    interval (``stats.percentile_interval``)."""
    return [
        r.get("user") for r in records if r.get(key) is not None and r.get("outcome") in GENERATED
    ]


def conv_len(r: Record) -> float:
    """A request's conversation length in tokens (its prompt when that is all we know)."""
    return float(r.get("conversation_tokens") or r.get("prompt_tokens") or 0)


NICE_STEPS = (500, 1000, 2000, 2500, 5000, 10_000, 20_000, 25_000, 50_000, 100_000)
"""Bucket widths in tokens that read well ("0-5k", "5k-10k")."""


def token_step(top: float, target: int = 8) -> int:
    """A round bucket width giving at most ``target`` buckets up to ``top`` tokens: the
    conversation-length buckets of the capacity answer and of ITL share it."""
    for step in NICE_STEPS:
        if top / step <= target:
            return step
    return int(10 ** math.ceil(math.log10(max(1.0, top / target))))


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (numpy's linear interpolation), None for no values."""
    import numpy as np  # here: the run path (the live view) never needs numpy

    return float(np.percentile(np.asarray(values, dtype=float), q)) if len(values) else None


def median(values: Sequence[float]) -> float | None:
    """The median (numpy's: the mean of the middle two for an even count), None for no
    values. Not ``percentile(values, 50)``, which can differ in the last bit."""
    import numpy as np

    return float(np.median(np.asarray(values, dtype=float))) if len(values) else None


@figure("spread")
def distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    """A figure's samples as n, mean, sd, p50, p95, p99, min and max (all None for no
    samples; sd 0.0 for one).

    Population: any figure's samples.

    Formula: sample standard deviation; n = samples; p = percentiles."""
    if not len(values):
        return {
            "n": 0,
            "mean": None,
            "sd": None,
            "p50": None,
            "p95": None,
            "p99": None,
            "min": None,
            "max": None,
        }
    import numpy as np

    a = np.asarray(values, dtype=float)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return {
        "n": int(a.size),
        "mean": float(a.mean()),
        "sd": float(a.std(ddof=1)) if a.size > 1 else 0.0,
        "p50": float(p50),
        "p95": float(p95),
        "p99": float(p99),
        "min": float(a.min()),
        "max": float(a.max()),
    }


def percentile_sorted(ordered: Sequence[float], q: float) -> float:
    """The q-th percentile of values already in ascending order, equal to numpy's linear
    interpolation bit for bit (a test holds it): no array made, for the many small sets
    of an analysis (each request's own gaps)."""
    n = len(ordered)
    h = q / 100 * (n - 1)
    lo = math.floor(h)
    a = ordered[lo]
    return _lerp(a, ordered[lo + 1] if lo + 1 < n else a, h - lo)


def _lerp(a: float, b: float, t: float) -> float:
    """numpy's own interpolation between neighbours ``a`` <= ``b`` (``_lerp``: from the
    nearer end), so a percentile here equals ``np.percentile`` to the last bit."""
    d = b - a
    return b - d * (1 - t) if t >= 0.5 else a + d * t


class _Heap:
    """A binary min-heap of floats in an ``array('d')`` (8 bytes a value; ``heapq`` needs a
    list, 32 bytes a value with its float objects)."""

    __slots__ = ("_a",)

    def __init__(self) -> None:
        self._a = array("d")

    def __len__(self) -> int:
        return len(self._a)

    def top(self) -> float:
        return self._a[0]

    def push(self, value: float) -> None:
        a = self._a
        a.append(value)
        i = len(a) - 1
        while i:
            parent = (i - 1) >> 1
            up = a[parent]
            if up <= value:
                break
            a[i] = up
            i = parent
        a[i] = value

    def pop(self) -> float:
        a = self._a
        top = a[0]
        last = a.pop()
        n = len(a)
        if n:
            i = 0
            while True:
                child = 2 * i + 1
                if child >= n:
                    break
                c = a[child]
                if child + 1 < n and a[child + 1] < c:
                    child += 1
                    c = a[child]
                if last <= c:
                    break
                a[i] = c
                i = child
            a[i] = last
        return top


class RunningPercentile:
    """``percentile(values, q)`` of every value added so far, kept exact as they arrive:
    two heaps split at the rank the linear interpolation reads (the smallest
    ``floor(q/100 * (n-1)) + 1`` values, and the rest), O(log n) an add and O(1) a read,
    8 bytes a value, with numpy's own interpolation formula, so the live view shows the
    very figure ``summary.json`` computes at the end without sorting every value at every
    refresh (``tests/analysis/test_figures.py`` holds the two equal)."""

    __slots__ = ("_hi", "_lo", "_q")

    def __init__(self, q: float) -> None:
        self._q = q / 100
        self._lo = _Heap()
        """The lower values, up to the rank read, negated (a max-heap)."""
        self._hi = _Heap()
        """The rest."""

    def __len__(self) -> int:
        return len(self._lo) + len(self._hi)

    def add(self, value: float) -> None:
        lo, hi = self._lo, self._hi
        n_lo = len(lo._a)  # the arrays' own len: no Python __len__ call
        n = n_lo + len(hi._a) + 1  # values held once this one is in
        if n_lo and value > -lo._a[0]:
            hi.push(value)
        else:
            lo.push(-value)
            n_lo += 1
        want = math.floor(self._q * (n - 1)) + 1
        while n_lo > want:
            hi.push(-lo.pop())
            n_lo -= 1
        while n_lo < want:
            lo.push(-hi.pop())
            n_lo += 1

    def value(self) -> float | None:
        lo, hi = self._lo, self._hi
        if not len(lo):
            return None
        h = self._q * (len(lo) + len(hi) - 1)
        a = -lo.top()
        return _lerp(a, hi.top() if len(hi) else a, h - math.floor(h))


@figure("TTFT p95 (the SLO's figure)")
def ttft_p95(records: Iterable[Record]) -> float | None:
    """TTFT p95 over ``records`` (warm-up ones dropped here).

    Population: non-warm-up requests that generated text (ok, reasoning_only); a request
    that failed after its first token is not counted.

    Formula: 95th percentile (linear) of ttft_s, with a percentile bootstrap 95% interval.

    The verdict's SLO check, the headline table, ``summary.json`` and ``stress ls`` all
    show this one number (the interval: ``stress.analysis.stats``)."""
    return percentile(generated_values(main_requests(records), "ttft_s"), 95)


@figure("decode p50 (the SLO's figure)")
def decode_p50(records: Iterable[Record]) -> float | None:
    """Decode p50 (tok/s) over ``records`` (warm-up ones dropped here).

    Population: as TTFT p95.

    Formula: median of decode_tok_s, with a percentile bootstrap 95% interval."""
    return percentile(generated_values(main_requests(records), "decode_tok_s"), 50)


def completion_tokens(records: Iterable[Record]) -> int:
    """``completion_tokens`` summed over exactly the requests given (no population
    applied: ``output_tokens`` and ``energy_tokens`` choose theirs)."""
    return sum(int(r.get("completion_tokens") or 0) for r in records)


@figure("output tokens")
def output_tokens(records: Iterable[Record]) -> int:
    """Output tokens over ``records`` (warm-up ones dropped here).

    Population: non-warm-up requests, every outcome.

    Formula: sum of completion_tokens (a truncated reply's tokens were generated too)."""
    return completion_tokens(main_requests(records))


@figure("aggregate output tok/s")
def output_tok_s(records: Iterable[Record], duration_s: float | None) -> float | None:
    """Output tok/s of the requests given over a span of ``duration_s`` seconds; None
    without a positive span.

    Population: non-warm-up requests.

    Formula: output tokens / run duration; spread over 30 equal time windows.

    Callers pass the population (``summary.json``: the run's non-warm-up requests over
    its duration; a phase or pass: its own requests over its own span, a warm-up pass's
    too); the windows are ``stress.report.headline.throughput_windows``."""
    if duration_s is None or duration_s <= 0:
        return None
    return sum(r.get("completion_tokens") or 0 for r in records) / duration_s


def prompt_tokens(records: Iterable[Record]) -> int:
    """``prompt_tokens`` summed over the requests given (unknown counts as 0)."""
    total: int = sum(r.get("prompt_tokens") or 0 for r in records)
    return total


def _has_cache_pair(r: Record) -> bool:
    return r.get("cached_tokens") is not None and bool(r.get("prompt_tokens"))


def cache_pairs(records: Iterable[Record]) -> tuple[list[float], list[float]]:
    """(cached, prompt) token pairs of requests whose cached and prompt counts are known."""
    cached: list[float] = []
    prompt: list[float] = []
    for r in records:
        if _has_cache_pair(r):
            cached.append(float(r["cached_tokens"]))
            prompt.append(float(r["prompt_tokens"]))
    return cached, prompt


def cache_pair_users(records: Iterable[Record]) -> list[Any]:
    """Each ``cache_pairs`` pair's user, in the same order (the clusters of its interval)."""
    return [r.get("user") for r in records if _has_cache_pair(r)]


@figure("prefix-cache hit (per request)")
def cached_share(records: Iterable[Record]) -> float | None:
    """Prefix-cache hit over ``records``; None when no prompt count is known.

    Population: requests whose cached_tokens and prompt_tokens are known.

    Formula: sum of cached_tokens / sum of prompt_tokens."""
    cached, prompt = cache_pairs(records)
    return sum(cached) / sum(prompt) if prompt and sum(prompt) > 0 else None


def kept_tokens(cached: float, reusable: float) -> float:
    """Reusable tokens the cache kept for one request: its cached tokens, counted up to
    what it could reuse (block alignment or a shared system prompt can report more)."""
    return min(cached, reusable)


def counts_for_retention(r: Record) -> bool:
    """A request is in the retention population when its cached tokens are known and it
    had something to reuse (a follow-up turn of a cached conversation)."""
    return r.get("cached_tokens") is not None and bool(r.get("reusable_tokens"))


@dataclass(slots=True)
class RetentionTally:
    """Running sums behind cache retention (the live view keeps one; two floats)."""

    kept: float = 0.0
    reusable: float = 0.0

    def add(self, cached: float, reusable: float) -> None:
        if reusable > 0:
            self.kept += kept_tokens(cached, reusable)
            self.reusable += reusable

    @property
    def value(self) -> float | None:
        """Sum of ``kept_tokens`` / sum of reusable tokens: 0..1, None if nothing reusable."""
        return self.kept / self.reusable if self.reusable else None


def retention(pairs: Iterable[tuple[float, float]]) -> float | None:
    """Cache retention over (cached, reusable) token pairs: sum of ``kept_tokens`` / sum
    of reusable tokens; between 0 and 1, None when nothing was reusable."""
    tally = RetentionTally()
    for cached, reusable in pairs:
        tally.add(cached, reusable)
    return tally.value


@figure("cache retention")
def cache_retention(records: Iterable[Record]) -> float | None:
    """Cache retention over ``records`` (callers pass non-warm-up ones: the run, a user,
    a round, a bucket), those that ``counts_for_retention``.

    Population: the group's requests (run, user, round, bucket; warm-up excluded) with
    cached_tokens known and reusable_tokens > 0.

    Formula: sum of min(cached_tokens, reusable_tokens) / sum of reusable_tokens: below 1 =
    evicted, never above 1."""
    return retention(
        (float(r["cached_tokens"]), float(r["reusable_tokens"]))
        for r in records
        if counts_for_retention(r)
    )


@figure("GPU energy")
def energy_j(
    gpu_summary: Mapping[str, Any] | None,
    samples: Iterable[Mapping[str, Any]],
    server_cards: Sequence[str] | None,
) -> float | None:
    """The run's GPU energy (J) over the collector's ``server_cards``.

    Population: the server's cards (every card when none was selected).

    Formula: sum of each card's guarded energy accumulator (wraps and resets handled, power
    integrated where the counter cannot be trusted).

    That is the GPU collector's own ``energy_j`` when its end-of-run summary exists; a run
    killed before it falls back on the accumulator totals its samples carry (``energy_j``
    in gpu.jsonl, the same accumulator: its last value minus its first). None: no GPU
    telemetry."""
    if gpu_summary and isinstance(gpu_summary.get("energy_j"), int | float):
        return float(gpu_summary["energy_j"])
    wanted = set(server_cards) if server_cards else None
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for rec in samples:
        for c in rec.get("cards") or []:
            key, e = str(c.get("key")), c.get("energy_j")
            if (wanted is not None and key not in wanted) or not isinstance(e, int | float):
                continue
            first.setdefault(key, float(e))
            last[key] = float(e)
    if not last:
        return None
    return sum(last[k] - first[k] for k in last)


def energy_tokens(records: Iterable[Record]) -> int:
    """Tokens the energy is divided by: ``completion_tokens`` of every request, warm-up
    included, since the energy covers the whole run."""
    return completion_tokens(records)


@figure("J per output token")
def j_per_token(energy: float | None, tokens: int) -> float | None:
    """Energy per output token: ``energy_j`` / ``energy_tokens``; None without either.

    Population: every request, warm-up included (the energy covers the whole run).

    Formula: GPU energy / sum of completion_tokens."""
    return energy / tokens if energy is not None and tokens > 0 else None


@figure("GPU mean (power, SM clock)")
def sample_mean(samples: Iterable[float]) -> float | None:
    """One card's mean power (W) or SM clock (MHz) over the run; None with no reading.

    Population: the card's GPU samples over the run, unread ones (NaN) left out.

    Formula: sum of the readings / their count."""
    read = [float(v) for v in samples if not math.isnan(v)]
    return math.fsum(read) / len(read) if read else None


@figure("GPU peak (power, temperature)")
def sample_peak(samples: Iterable[float]) -> float | None:
    """One card's highest power (W) or temperature (C) over the run; None with no reading.

    Population: the card's GPU samples over the run, unread ones (NaN) left out.

    Formula: the largest reading."""
    return max((float(v) for v in samples if not math.isnan(v)), default=None)


@figure("live TTFT p50")
def live_ttft_p50(ttfts: Sequence[float]) -> float | None:
    """The live view's recent TTFT (s); None before the window holds one.

    Population: non-warm-up requests with a first token that ended in the live view's
    last minute.

    Formula: median of their TTFT (``statistics.median``: the run's process loads no numpy)."""
    return statistics.median(ttfts) if ttfts else None


@figure("live output tok/s")
def live_output_tok_s(tokens: int, span_s: float) -> float:
    """The live view's recent output rate.

    Population: requests that ended in the live view's window of whole seconds [t - 60, t],
    warm-up included (the server generated those tokens too).

    Formula: their completion_tokens / the window's span (a reply's tokens count at its end)."""
    return tokens / span_s if span_s > 0 else 0.0


@figure("live prefix-cache hit")
def live_cached_share(cached: int, prompt: int) -> float | None:
    """The live view's recent prefix-cache hit; None while no request in the window has
    both counts.

    Population: requests that ended in the live view's last minute whose cached_tokens and
    prompt_tokens are known, warm-up included.

    Formula: sum of cached_tokens / sum of prompt_tokens."""
    return cached / prompt if prompt > 0 else None


@figure("KV pool")
def kv_pool_tokens(
    server_samples: Iterable[Mapping[str, Any]],
    server_summary: Mapping[str, Any] | None,
    probe: Mapping[str, Any] | None,
) -> float | None:
    """The server's KV pool in tokens, from the first source that has it: the last
    server.jsonl sample that reports it (vLLM cache_config_info, SGLang
    max_total_num_tokens), the server collector's summary, then the probe in the manifest
    (llama.cpp: the sum of /slots n_ctx, which its /metrics does not carry).

    Population: the run's telemetry.

    Formula: kv_pool_tokens of the last server sample that has it, else the server
    collector's summary, else the pre-flight probe (llama.cpp: sum of /slots n_ctx, which
    no output shows as a pool: its slots are separate contexts, stated as slots x n_ctx)."""
    for rec in reversed(list(server_samples)):
        v = (rec.get("values") or {}).get("kv_pool_tokens")
        if isinstance(v, int | float) and v > 0:
            return float(v)
    for source in (server_summary, probe):
        v = (source or {}).get("kv_pool_tokens")
        if isinstance(v, int | float) and v > 0:
            return float(v)
    return None


def _elsewhere(name: str, population: str, formula: str, where: str) -> FigureDef:
    """A figure computed outside this module (while a request is read, from tokens.bin,
    by a collector): its definition here, ``where`` naming the function that computes it."""
    return FigureDef(name, population, formula, where)


FIGURES: tuple[FigureDef, ...] = (
    _elsewhere(
        "TTFT",
        "per request",
        "first chunk carrying generated text (reasoning or content) - request sent",
        "stress.net.reply:ReplyReader._events",
    ),
    _elsewhere(
        "TTFC",
        "per request",
        "first chunk carrying answer content - request sent",
        "stress.net.reply:ReplyReader._events",
    ),
    _elsewhere(
        "decode tok/s",
        "per request",
        "(completion_tokens - 1) / (t_last_token - t_first_token)",
        "stress.net.reply:ReplyReader._end_stream",
    ),
    _elsewhere(
        "e2e",
        "per request",
        "last byte - request sent (the client's own queueing is reported apart, queue_s)",
        "stress.net.client:ChatClient._finish",
    ),
    defined(ttft_p95),
    defined(decode_p50),
    _elsewhere(
        "SLO factor",
        "one SLO figure; judged from 20 samples",
        "figure / limit (TTFT) or limit / figure (decode): above 1 missed, above 2 FAIL",
        "stress.analysis.judge:SloCheck.factor",
    ),
    _elsewhere(
        "goodput",
        "non-warm-up turns, every outcome (overall, per user, per capacity bucket)",
        "share answered (ok) with TTFT <= the TTFT limit and decode >= the decode floor",
        "stress.analysis.capacity:Limits.good",
    ),
    _elsewhere(
        "longest silence",
        "every non-warm-up request that has one, failed ones (stalls) included",
        "max_gap_s: the longest gap between two chunks after the first token, per stream",
        "stress.net.reply:ReplyReader._end_stream",
    ),
    _elsewhere(
        "ITL",
        "gaps between consecutive chunks that carried generated text (content or "
        "reasoning) of non-warm-up streamed requests that generated text (ok, "
        "reasoning_only), from tokens.bin; overall, per user, per conversation-length bucket",
        "receive time of text chunk k+1 - text chunk k (chunks in one read: 0); percentiles "
        "from log bins of 1/128 decade (within 1%), mean and max exact",
        "stress.analysis.itl:token_timing",
    ),
    _elsewhere(
        "ITL per request",
        "as ITL, one request's own gaps",
        "p50, p95 (linear) and max of its gaps; the ITL p95 per request is distributed over "
        "requests",
        "stress.analysis.itl:request_itl",
    ),
    _elsewhere(
        "TPOT",
        "per request, as TTFT p95 (overall, per user, per conversation-length bucket)",
        "(t_last_token - t_first_token) / (completion_tokens - 1), i.e. 1 / decode tok/s",
        "stress.analysis.itl:tpot",
    ),
    _elsewhere(
        "goodput (TTFT + ITL)",
        "non-warm-up turns, every outcome (overall, per user), when slo.itl_p95 is set and "
        "the run has tokens.bin",
        "share answered (ok) with TTFT <= the TTFT limit (when set) and the request's own "
        "ITL p95 <= slo.itl_p95 (a reply of one chunk: TTFT alone)",
        "stress.analysis.itl:good_on_ttft_and_itl",
    ),
    _elsewhere(
        "server-wide pauses",
        "every request with a tokens.bin frame (warm-up and failed ones too), each stream "
        "running from its first to its last text chunk; at least 2 streams running",
        "intervals between two consecutive text chunks of the whole run longer than "
        "max(1 s, 10 x ITL p50) across which every running stream was silent: count, total "
        "s, longest, total / run duration, streams frozen per pause; frozen share = sum of "
        "pause x streams / sum of the streams' first-to-last-chunk time",
        "stress.analysis.itl:server_pauses",
    ),
    defined(output_tokens),
    defined(output_tok_s),
    _elsewhere(
        "offered load",
        "open-loop runs (arrivals): every arrival, admitted or not (session_ended events)",
        "arrivals / the window sessions arrived in, per minute; offered requests/s = that "
        "/ 60 x the mean rounds drawn; gap CV = sd / mean of the gaps between arrivals",
        "stress.analysis.arrivals:open_load",
    ),
    _elsewhere(
        "achieved load",
        "open-loop runs: sessions admitted, sessions that did all their rounds, requests",
        "admitted / arrival window and completed / run duration, per minute; requests "
        "sent (warm-up included) / run duration, per second",
        "stress.analysis.arrivals:open_load",
    ),
    defined(cached_share),
    defined(cache_retention),
    _elsewhere(
        "server hit rate",
        "the server's prefix-cache counters",
        "delta(prefix hits) / delta(prefix queries) between scrapes",
        "stress.collectors.server:ServerCollector._compute_live",
    ),
    _elsewhere(
        "requests in flight",
        "every non-warm-up request, at each one's start",
        "requests started by then minus requests ended by then",
        "stress.analysis.capacity:in_flight_at_start",
    ),
    _elsewhere(
        "working set",
        "every user, at a moment",
        "sum of the users' live conversation lengths (prompt while a request runs, prompt "
        "+ reply after; a replay's requests, single turns that never come back, only while "
        "they run)",
        "stress.analysis.causes:run_working_set",
    ),
    defined(kv_pool_tokens),
    _elsewhere(
        "users the pool holds",
        "every user",
        "KV pool / mean over users of each one's largest conversation (prompt + reply); "
        "none on llama.cpp (slots are separate contexts) or in a replay",
        "stress.analysis.capacity:capacity_answer",
    ),
    _elsewhere(
        "retention past the slots",
        "llama.cpp runs with a known slot count: non-warm-up follow-up turns with cached "
        "tokens known and something to reuse, split by whether turns of at least as many "
        "other users as there are slots started between the user's previous turn's end and "
        "this turn's start (its slot most likely taken: llama.cpp reuses the idle slot "
        "holding the same prompt, else the least recently used)",
        "cache retention of each side: what the past-the-slots turns kept came from the "
        "host-RAM prompt cache (--cache-ram)",
        "stress.analysis.server_kind:past_slots",
    ),
    defined(energy_j),
    defined(j_per_token),
    defined(sample_mean),
    defined(sample_peak),
    defined(live_ttft_p50),
    defined(live_output_tok_s),
    defined(live_cached_share),
    defined(distribution),
)
"""The figures every output shows, in the report's order: the registered ones (their
definitions read from their docstrings) and those computed elsewhere (``where``). The
report's definitions and docs/metrics.md's table are generated from this (a test keeps the
docs in sync, another that every registered figure is here)."""


def definitions_markdown() -> str:
    """docs/metrics.md's table of figures (``python -m stress.analysis.figures``)."""
    lines = ["| figure | population | formula |", "|---|---|---|"]
    lines += [f"| {f.name} | {f.population} | {f.formula} |" for f in FIGURES]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(definitions_markdown(), end="")
