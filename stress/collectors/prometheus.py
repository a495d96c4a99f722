"""Prometheus text -> a few canonical numbers per server dialect, and counter deltas.

Why this exists: vLLM, SGLang and llama.cpp expose the same ideas (running requests, KV
usage, prefix-cache hits, preemptions) under different names, labels and semantics, and the
names move between versions (vLLM's ``gpu_*`` names were renamed, llama.cpp lost its KV
metric). The collector and the probe want one vocabulary. This module is pure: text in,
numbers out, no I/O, so every mapping is tested on real payloads.

Parsing is done by ``prometheus_client``'s own parser; after parsing, counter samples carry
their ``_total`` suffix whether or not the server wrote it (llama.cpp declares
``n_tokens_max`` as a counter without one), so the dialect tables use ``_total`` names.

Canonical names (all optional; a value is absent when the server does not expose it):

counters (monotonic, turned into deltas by :class:`CounterTracker`)
    ``prompt_tokens`` (all prompt tokens, cached included, where the server tells),
    ``prompt_computed_tokens`` (prompt tokens actually prefilled), ``gen_tokens``,
    ``prefix_queries`` / ``prefix_hits`` (tokens), ``preemptions`` (vLLM preemptions,
    SGLang retractions), ``spec_drafts``, ``spec_draft_tokens``, ``spec_accepted_tokens``,
    ``requests_finished``, ``progress`` (a counter that moves whenever the engine does
    work, even mid-request: only used to tell a hang from a long request),
    ``queue_time_s`` / ``queue_time_n`` and ``prefill_time_s`` / ``prefill_time_n`` (the
    ``_sum`` and ``_count`` of the server's per-request queue-time and prefill-time
    histograms: seconds and requests, so a window's mean is a ratio of two deltas; vLLM
    has both, SGLang the queue time only, llama.cpp neither)
gauges
    ``running``, ``waiting``, ``kv_usage`` (0..1), ``kv_pool_tokens``, ``kv_used_tokens``,
    ``spec_accept_rate`` (SGLang gauge), ``spec_accept_length``, ``batch_hit_rate``
    (SGLang's per-batch gauge: recorded, never used as the hit rate), ``max_seq_tokens``,
    ``process_start`` (process start time; a change means a restart)
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Dialect = Literal["vllm", "sglang", "llamacpp"]
Agg = Literal["sum", "mean", "max"]

DIALECTS: tuple[Dialect, ...] = ("vllm", "sglang", "llamacpp")

COUNTERS: frozenset[str] = frozenset(
    {
        "prompt_tokens",
        "prompt_computed_tokens",
        "gen_tokens",
        "prefix_queries",
        "prefix_hits",
        "preemptions",
        "spec_drafts",
        "spec_draft_tokens",
        "spec_accepted_tokens",
        "requests_finished",
        "progress",
        "queue_time_s",
        "queue_time_n",
        "prefill_time_s",
        "prefill_time_n",
    }
)
GAUGES: frozenset[str] = frozenset(
    {
        "running",
        "waiting",
        "kv_usage",
        "kv_pool_tokens",
        "kv_used_tokens",
        "spec_accept_rate",
        "spec_accept_length",
        "batch_hit_rate",
        "max_seq_tokens",
        "process_start",
    }
)

METRICS_FLAGS: dict[str, str] = {
    "vllm": "vLLM serves /metrics unless started with --disable-log-stats: remove that flag",
    "sglang": "start SGLang with --enable-metrics",
    "llamacpp": "start llama-server with --metrics",
}
"""How to turn each dialect's /metrics on, for the pre-flight and the server collector."""


def normalize_base_url(url: str) -> str:
    """Server root without a trailing slash or ``/v1`` (users often paste the API base)."""
    url = url.strip().rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


class MetricsParseError(ValueError):
    """The /metrics body is not Prometheus text."""


@dataclass(frozen=True, slots=True)
class Sample:
    """One exposed series value: ``name{labels} value``."""

    name: str
    labels: Mapping[str, str]
    value: float


@dataclass(frozen=True, slots=True)
class MetricSet:
    """All samples of one scrape, indexed by sample name."""

    by_name: Mapping[str, tuple[Sample, ...]]

    def get(self, name: str) -> tuple[Sample, ...]:
        return self.by_name.get(name, ())

    def has(self, name: str) -> bool:
        return name in self.by_name

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.by_name)

    def __len__(self) -> int:
        return sum(len(v) for v in self.by_name.values())


_NONSTANDARD_NAN = re.compile(
    r"(?<=[ \t])[-+]?nan\([0-9A-Za-z_]*\)(?=[ \t]|$)", re.IGNORECASE | re.MULTILINE
)
"""MSVC prints 0/0 as ``-nan(ind)`` (idle Windows llama-server); Python's float() refuses it."""


def parse_metrics(text: str) -> MetricSet:
    """Parse Prometheus text exposition; NaN samples are dropped."""
    # imported at the first parse: the package's own import brings its HTTP server,
    # wsgiref and email (~35 modules, 15-34 ms on 2 cores), on the way to the first
    # request of a run whose server has no /metrics to parse (issue 15)
    from prometheus_client.parser import text_string_to_metric_families

    text = _NONSTANDARD_NAN.sub("NaN", text)
    index: dict[str, list[Sample]] = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                value = float(s.value)
                if math.isnan(value):
                    continue
                index.setdefault(s.name, []).append(Sample(s.name, dict(s.labels), value))
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise MetricsParseError(f"not Prometheus text: {exc}") from exc
    return MetricSet({k: tuple(v) for k, v in index.items()})


# --- dialect tables -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Series:
    """How to read one metric: its sample name, optional label filter, and aggregation."""

    name: str
    where: Mapping[str, frozenset[str]] = field(default_factory=dict)
    agg: Agg = "sum"


Alt = tuple[Series, ...]
"""One way to compute a canonical value: the listed series, added together."""


def _s(name: str, agg: Agg = "sum", **where: Iterable[str]) -> Series:
    return Series(name, {k: frozenset(v) for k, v in where.items()}, agg)


_PROCESS_START: tuple[Alt, ...] = ((_s("process_start_time_seconds", "max"),),)

_VLLM: dict[str, tuple[Alt, ...]] = {
    "prompt_tokens": ((_s("vllm:prompt_tokens_total"),),),
    "prompt_computed_tokens": (
        (_s("vllm:prompt_tokens_by_source_total", source=["local_compute"]),),
    ),
    "gen_tokens": ((_s("vllm:generation_tokens_total"),),),
    # New names first; the gpu_* names are the pre-0.10 spelling (removed ~0.12).
    "prefix_queries": (
        (_s("vllm:prefix_cache_queries_total"),),
        (_s("vllm:gpu_prefix_cache_queries_total"),),
    ),
    "prefix_hits": (
        (_s("vllm:prefix_cache_hits_total"),),
        (_s("vllm:gpu_prefix_cache_hits_total"),),
    ),
    "preemptions": ((_s("vllm:num_preemptions_total"),),),
    "spec_drafts": ((_s("vllm:spec_decode_num_drafts_total"),),),
    "spec_draft_tokens": ((_s("vllm:spec_decode_num_draft_tokens_total"),),),
    "spec_accepted_tokens": ((_s("vllm:spec_decode_num_accepted_tokens_total"),),),
    "requests_finished": ((_s("vllm:request_success_total"),),),
    # Updated every engine step (iteration stats), so it moves during long requests.
    "progress": ((_s("vllm:generation_tokens_total"), _s("vllm:prompt_tokens_total")),),
    # Histograms (TELEMETRY.md 1): time in the waiting queue, then in prefill, per request.
    "queue_time_s": ((_s("vllm:request_queue_time_seconds_sum"),),),
    "queue_time_n": ((_s("vllm:request_queue_time_seconds_count"),),),
    "prefill_time_s": ((_s("vllm:request_prefill_time_seconds_sum"),),),
    "prefill_time_n": ((_s("vllm:request_prefill_time_seconds_count"),),),
    "running": ((_s("vllm:num_requests_running"),),),
    "waiting": ((_s("vllm:num_requests_waiting"),),),
    "kv_usage": (
        (_s("vllm:kv_cache_usage_perc", "mean"),),
        (_s("vllm:gpu_cache_usage_perc", "mean"),),
    ),
    "process_start": _PROCESS_START,
}

_SGLANG_HITS = ["device_hit", "host_hit", "storage_hit"]
_SGLANG: dict[str, tuple[Alt, ...]] = {
    "prompt_tokens": ((_s("sglang:prompt_tokens_total"),),),
    "prompt_computed_tokens": ((_s("sglang:realtime_tokens_total", mode=["prefill_compute"]),),),
    "gen_tokens": ((_s("sglang:generation_tokens_total"),),),
    # prefill_effective_tokens_total excludes retraction re-counts: best for the hit rate.
    "prefix_queries": (
        (_s("sglang:prefill_effective_tokens_total"),),
        (_s("sglang:realtime_tokens_total", mode=["prefill_compute", "prefill_cache"]),),
    ),
    "prefix_hits": (
        (_s("sglang:prefill_effective_tokens_total", mode=_SGLANG_HITS),),
        (_s("sglang:realtime_tokens_total", mode=["prefill_cache"]),),
    ),
    "preemptions": ((_s("sglang:num_retracted_requests_total"),),),
    "requests_finished": ((_s("sglang:num_requests_total"),),),
    # prompt/generation_tokens_total are counted per finished request; realtime_tokens_total
    # follows the scheduler's work as it happens.
    "progress": (
        (_s("sglang:realtime_tokens_total"),),
        (_s("sglang:generation_tokens_total"), _s("sglang:prompt_tokens_total")),
    ),
    # Histogram (TELEMETRY.md 2); SGLang exposes no per-request prefill-time histogram.
    "queue_time_s": ((_s("sglang:queue_time_seconds_sum"),),),
    "queue_time_n": ((_s("sglang:queue_time_seconds_count"),),),
    "running": ((_s("sglang:num_running_reqs"),),),
    "waiting": ((_s("sglang:num_queue_reqs"),),),
    "kv_usage": ((_s("sglang:token_usage", "mean"),),),
    "kv_pool_tokens": ((_s("sglang:max_total_num_tokens"),),),
    "kv_used_tokens": ((_s("sglang:num_used_tokens"),),),
    "spec_accept_rate": ((_s("sglang:spec_accept_rate", "mean"),),),
    "spec_accept_length": ((_s("sglang:spec_accept_length", "mean"),),),
    "batch_hit_rate": ((_s("sglang:cache_hit_rate", "mean"),),),
    "process_start": _PROCESS_START,
}

_LLAMACPP: dict[str, tuple[Alt, ...]] = {
    # llamacpp:prompt_tokens_total counts prompt tokens *processed* (cached ones excluded).
    "prompt_tokens": (
        (_s("llamacpp:prompt_tokens_total"), _s("llamacpp:prompt_tokens_cached_total")),
        (_s("llamacpp:prompt_tokens_total"),),
    ),
    "prompt_computed_tokens": ((_s("llamacpp:prompt_tokens_total"),),),
    "gen_tokens": ((_s("llamacpp:tokens_predicted_total"),),),
    "prefix_queries": (
        (_s("llamacpp:prompt_tokens_total"), _s("llamacpp:prompt_tokens_cached_total")),
    ),
    "prefix_hits": ((_s("llamacpp:prompt_tokens_cached_total"),),),
    "spec_drafts": ((_s("llamacpp:spec_decode_num_drafts_total"),),),
    "spec_draft_tokens": ((_s("llamacpp:spec_decode_num_draft_tokens_total"),),),
    "spec_accepted_tokens": ((_s("llamacpp:spec_decode_num_accepted_tokens_total"),),),
    # Token totals are added when a slot finishes; llama_decode() calls are counted per
    # batch, so they show progress during a long generation.
    "progress": ((_s("llamacpp:n_decode_total"),),),
    "running": ((_s("llamacpp:requests_processing"),),),
    "waiting": ((_s("llamacpp:requests_deferred"),),),
    # Removed in May 2025 (PR #13660); kept for older builds.
    "kv_usage": ((_s("llamacpp:kv_cache_usage_ratio", "mean"),),),
    "max_seq_tokens": (
        (_s("llamacpp:n_tokens_max_total", "max"),),
        (_s("llamacpp:n_tokens_max", "max"),),
    ),
}

TABLES: Mapping[Dialect, Mapping[str, tuple[Alt, ...]]] = {
    "vllm": _VLLM,
    "sglang": _SGLANG,
    "llamacpp": _LLAMACPP,
}

REPLICA_LABELS: Mapping[Dialect, tuple[str, ...]] = {
    "vllm": (),
    # With --enable-metrics-for-all-schedulers every TP rank reports the same numbers;
    # keep the lowest rank so they are not counted twice. dp_rank is summed.
    "sglang": ("tp_rank", "pp_rank", "moe_ep_rank"),
    "llamacpp": (),
}

PREFIXES: Mapping[Dialect, str] = {"vllm": "vllm:", "sglang": "sglang:", "llamacpp": "llamacpp:"}


def detect_dialect(metrics: MetricSet) -> Dialect | None:
    """The dialect whose prefix most sample names carry, or None for a foreign exposition."""
    counts = {d: sum(1 for n in metrics.names if n.startswith(p)) for d, p in PREFIXES.items()}
    best = max(counts, key=lambda d: counts[d])
    return best if counts[best] > 0 else None


def _rank_key(value: str) -> tuple[int, str]:
    return (int(value), "") if value.isdigit() else (1 << 30, value)


def _select(samples: Iterable[Sample], series: Series, replicas: tuple[str, ...]) -> list[float]:
    picked = [
        s for s in samples if all(s.labels.get(k) in allowed for k, allowed in series.where.items())
    ]
    for label in replicas:
        present = [s.labels[label] for s in picked if label in s.labels]
        if present:
            lowest = min(present, key=_rank_key)
            picked = [s for s in picked if s.labels.get(label, lowest) == lowest]
    return [s.value for s in picked]


def _aggregate(values: list[float], agg: Agg) -> float:
    if agg == "mean":
        return sum(values) / len(values)
    if agg == "max":
        return max(values)
    return sum(values)


def _read_alt(metrics: MetricSet, alt: Alt, replicas: tuple[str, ...]) -> float | None:
    # An alternative counts when every metric it names exists; a label series not yet
    # created (no hits so far) reads as 0 rather than switching to another alternative.
    if not all(metrics.has(s.name) for s in alt):
        return None
    total = 0.0
    for series in alt:
        values = _select(metrics.get(series.name), series, replicas)
        if values:
            total += _aggregate(values, series.agg)
    return total


def canonical(metrics: MetricSet, dialect: Dialect) -> dict[str, float]:
    """Canonical values present in this scrape (see the module docstring for names)."""
    replicas = REPLICA_LABELS[dialect]
    out: dict[str, float] = {}
    for key, alts in TABLES[dialect].items():
        for alt in alts:
            value = _read_alt(metrics, alt, replicas)
            if value is not None:
                out[key] = value
                break
    if dialect == "vllm":
        pool = vllm_kv_pool_tokens(metrics)
        if pool is not None:
            out["kv_pool_tokens"] = float(pool)
    return out


def info_labels(metrics: MetricSet, name: str) -> list[dict[str, str]]:
    """The label sets of an info-style gauge such as ``vllm:cache_config_info``."""
    return [dict(s.labels) for s in metrics.get(name)]


def _as_int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def vllm_kv_pool_tokens(metrics: MetricSet) -> int | None:
    """KV pool size in tokens from ``cache_config_info``, summed over engines.

    Newer builds label ``kv_cache_size_tokens``; older ones only ``num_gpu_blocks`` and
    ``block_size``, whose product is the same figure.
    """
    per_engine: dict[str, int] = {}
    for labels in info_labels(metrics, "vllm:cache_config_info"):
        tokens = _as_int(labels.get("kv_cache_size_tokens"))
        if tokens is None:
            blocks = _as_int(labels.get("num_gpu_blocks"))
            size = _as_int(labels.get("block_size"))
            tokens = blocks * size if blocks is not None and size is not None else None
        if tokens is not None:
            per_engine[labels.get("engine", "0")] = tokens
    return sum(per_engine.values()) if per_engine else None


# --- counter deltas -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CounterUpdate:
    """What changed between two scrapes."""

    deltas: dict[str, float]
    """Increase since the previous scrape, never negative."""
    reset: bool
    """A counter went backwards (or a restart was signalled): the server restarted."""
    reset_names: tuple[str, ...]
    first: bool
    """This was the baseline scrape: deltas are empty."""


class CounterTracker:
    """Turns cumulative counters into per-scrape increases, surviving restarts.

    A counter that goes down means the process behind it restarted and began again at 0,
    so every counter's increase for that scrape is its current value, never a negative
    delta. Counters missing from one scrape keep their last value; a counter seen for the
    first time becomes its own baseline.
    """

    def __init__(self, tolerance: float = 1e-6) -> None:
        self._last: dict[str, float] = {}
        self._totals: dict[str, float] = {}
        self._started = False
        self._tolerance = tolerance

    @property
    def totals(self) -> dict[str, float]:
        """Increase since the first scrape, summed across restarts."""
        return dict(self._totals)

    def update(self, values: Mapping[str, float], restarted: bool = False) -> CounterUpdate:
        if not self._started:
            self._started = True
            self._last.update(values)
            for name in values:
                self._totals.setdefault(name, 0.0)
            return CounterUpdate({}, False, (), True)
        went_back = tuple(
            sorted(
                n
                for n, v in values.items()
                if n in self._last and v < self._last[n] - self._tolerance
            )
        )
        reset = restarted or bool(went_back)
        deltas: dict[str, float] = {}
        for name, value in values.items():
            if reset:
                deltas[name] = max(value, 0.0)
            elif name in self._last:
                deltas[name] = max(value - self._last[name], 0.0)
            else:
                deltas[name] = 0.0
            self._last[name] = value
            self._totals[name] = self._totals.get(name, 0.0) + deltas[name]
        return CounterUpdate(deltas, reset, went_back, False)
