"""Token timing: ITL and TPOT distributions, and goodput on TTFT and ITL together.

Read from ``tokens.bin`` (``stress.store.token_times``: every text chunk's receive time, per
request) joined to ``requests.jsonl`` by ``request_id``. The figures and their
populations are defined in ``stress.analysis.figures.FIGURES`` (ITL, ITL per request,
TPOT, goodput (TTFT + ITL)); this module computes them, once per run, for
``summary.json``, the report and ``stress compare``.

- ITL: each gap between consecutive chunks that carried generated text, of non-warm-up
  requests that generated text (``ok``, ``reasoning_only``), streamed: all of them, per
  user and per conversation-length bucket, counted in log histograms
  (``stress.analysis.loghist``: bounded memory, percentiles within 1 %);
- ITL per request: each request's own gaps, exactly (p50, p95, max, mean);
- TPOT: per request, ``(t_last_token - t_first_token) / (completion_tokens - 1)``, that is
  ``1 / decode_tok_s``: from ``requests.jsonl``, so older runs have it too;
- goodput (TTFT + ITL): when the scenario sets ``slo.itl_p95``, the share of non-warm-up
  turns answered with TTFT within ``slo.ttft_p95`` (when set) and their own ITL p95 within
  ``slo.itl_p95``.

A run recorded before ``tokens.bin`` existed has TPOT and no ITL (``available`` False).
A time-scaled simulator run is on the simulated clock, like every other figure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from stress.analysis import figures
from stress.analysis.capacity import token_step
from stress.analysis.causes import conv_len
from stress.analysis.figures import Record
from stress.analysis.loghist import LogHistogram
from stress.analysis.rundata import RunData
from stress.analysis.stats import describe
from stress.store.token_times import FILE_NAME, ReadReport, read_frames

ITL_QUANTILES = (50, 95)
"""Per request: the percentiles of its own gaps that are kept."""


@dataclass(frozen=True, slots=True)
class RequestItl:
    """One request's own gaps (seconds): how many text chunks, and their gaps' figures
    (None when it had a single chunk, so no gap)."""

    chunks: int
    mean: float | None
    p50: float | None
    p95: float | None
    max: float | None


@dataclass(slots=True)
class Group:
    """ITL (all gaps) and TPOT (per request) of a group of requests."""

    itl: LogHistogram = field(default_factory=LogHistogram)
    tpot: list[float] = field(default_factory=list)
    requests: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "itl_s": self.itl.as_dict(),
            "tpot_s": _describe(self.tpot),
        }


@dataclass(slots=True)
class LengthBucket:
    label: str
    lo: float
    hi: float
    group: Group


@dataclass(slots=True)
class TokenTiming:
    """The run's token-timing figures (``available``: it has ``tokens.bin`` frames)."""

    available: bool
    read: ReadReport
    overall: Group
    per_request: dict[str, RequestItl]
    per_user: dict[int, Group]
    by_length: list[LengthBucket]
    ttft_limit: float | None = None
    itl_limit: float | None = None
    goodput: float | None = None
    """Share of non-warm-up turns good on TTFT and ITL together (``slo.itl_p95`` set and
    ``tokens.bin`` present), else None."""
    goodput_by_user: dict[int, float] = field(default_factory=dict)

    @property
    def itl_p95_per_request(self) -> list[float]:
        return [r.p95 for r in self.per_request.values() if r.p95 is not None]

    def as_dict(self) -> dict[str, Any]:
        """``summary.json``'s ``token_timing`` section."""
        return {
            "available": self.available,
            "tokens_file": {
                "frames": self.read.frames,
                "damaged": self.read.damaged,
                "skipped_bytes": self.read.skipped_bytes,
            },
            **self.overall.as_dict(),
            "itl_p95_per_request_s": _describe(self.itl_p95_per_request),
            "per_user": {str(u): g.as_dict() for u, g in sorted(self.per_user.items())},
            "by_length": [
                {"label": b.label, "lo": b.lo, "hi": b.hi, **b.group.as_dict()}
                for b in self.by_length
            ],
            "slo_itl_p95_s": self.itl_limit,
            "goodput_ttft_itl": self.goodput,
            "goodput_ttft_itl_by_user": {
                str(u): v for u, v in sorted(self.goodput_by_user.items())
            },
        }


def _describe(values: Sequence[float]) -> dict[str, Any]:
    d = describe(values)
    return {"n": d.n, "mean": d.mean, "sd": d.sd, "p50": d.p50, "p95": d.p95, "p99": d.p99}


def in_population(r: Record) -> bool:
    """ITL's population: a non-warm-up request that generated text, streamed."""
    return (
        not r.get("warmup")
        and r.get("outcome") in figures.GENERATED
        and r.get("streamed") is not False
    )


def tpot(r: Record) -> float | None:
    """TPOT (s) of one request: ``1 / decode_tok_s``, i.e. (t_last_token - t_first_token)
    / (completion_tokens - 1); None without a decode speed (fewer than two tokens)."""
    d = r.get("decode_tok_s")
    return 1.0 / float(d) if isinstance(d, int | float) and d > 0 else None


def request_itl(values: np.ndarray[Any, Any]) -> RequestItl:
    """A request's own ITL figures from its ``tokens.bin`` frame (``values[0]`` is its
    TTFT, the rest its gaps)."""
    gaps = np.asarray(values[1:], dtype=np.float64)
    gaps = gaps[np.isfinite(gaps) & (gaps >= 0.0)]
    if not gaps.size:
        return RequestItl(len(values), None, None, None, None)
    ordered = sorted(gaps.tolist())  # a few µs; np.percentile's set-up took ~60 a request
    p50, p95 = (figures.percentile_sorted(ordered, q) for q in ITL_QUANTILES)
    return RequestItl(len(values), float(gaps.mean()), p50, p95, ordered[-1])


def _k(v: float) -> str:
    return f"{v / 1000:g}k" if v >= 1000 else f"{v:g}"


def good_on_ttft_and_itl(
    r: Record, itl: RequestItl | None, ttft_limit: float | None, itl_limit: float
) -> bool:
    """Goodput (TTFT + ITL) of one turn: answered (``ok``), TTFT within ``ttft_limit``
    (when set) and its own ITL p95 within ``itl_limit``; a reply without a gap (a single
    chunk) is judged on TTFT alone."""
    if r.get("outcome") not in figures.ANSWERED:
        return False
    ttft = r.get("ttft_s")
    if ttft_limit is not None and (ttft is None or float(ttft) > ttft_limit):
        return False
    return itl is None or itl.p95 is None or itl.p95 <= itl_limit


def _limit(slo: Mapping[str, Any], key: str) -> float | None:
    v = slo.get(key)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and v > 0 else None


BATCH_VALUES = 1 << 18
"""Gaps held before they are added to the groups' histograms (2 MiB)."""


class _Batches:
    """Each group's gaps added to its histogram in batches: one vectorised add per group
    per ``BATCH_VALUES`` gaps instead of three small ones per request (60,000 requests:
    2.6 s of numpy's per-call overhead on a 2-core machine). A request's gaps are one array
    shared by its three groups, so at most ``BATCH_VALUES`` gaps are held at once."""

    def __init__(self) -> None:
        self._pending: dict[int, tuple[Group, list[np.ndarray[Any, Any]]]] = {}
        self._size = 0

    def add(self, groups: tuple[Group, ...], gaps: np.ndarray[Any, Any]) -> None:
        for g in groups:
            entry = self._pending.get(id(g))
            if entry is None:
                self._pending[id(g)] = (g, [gaps])
            else:
                entry[1].append(gaps)
        self._size += gaps.size
        if self._size >= BATCH_VALUES:
            self.flush()

    def flush(self) -> None:
        for g, parts in self._pending.values():
            g.itl.add(np.concatenate(parts))
        self._pending.clear()
        self._size = 0


def token_timing(run: RunData) -> TokenTiming:
    """Read ``tokens.bin`` of ``run`` (streamed, one frame at a time) and compute the token
    timing figures; a run without the file gets TPOT only."""
    scale = run.files.time_scale
    rows = [r for r in run.requests if in_population(r)]
    by_id: dict[str, Record] = {str(r["request_id"]): r for r in rows if r.get("request_id")}
    overall = Group()
    per_user: dict[int, Group] = {}
    top = max((conv_len(r) for r in rows), default=0.0)
    step = token_step(top) if top > 0 else 1  # the capacity answer's length buckets
    buckets: dict[int, Group] = {}

    def groups_of(r: Record) -> tuple[Group, Group, Group]:
        u = per_user.setdefault(int(r.get("user") or 0), Group())
        b = buckets.setdefault(int(conv_len(r) // step), Group())
        return overall, u, b

    for r in rows:
        t = tpot(r)
        for g in groups_of(r):
            g.requests += 1
            if t is not None:
                g.tpot.append(t)
    report = ReadReport()
    per_request: dict[str, RequestItl] = {}
    batches = _Batches()
    for rid, values in read_frames(run.path / FILE_NAME, report):
        row = by_id.get(rid)
        if row is None or rid in per_request:  # warm-up, failed, or a duplicate frame
            continue
        v = values.astype(np.float64) * scale if scale != 1.0 else values
        per_request[rid] = request_itl(v)
        batches.add(groups_of(row), v[1:])
    batches.flush()
    timing = TokenTiming(
        available=report.frames > 0,
        read=report,
        overall=overall,
        per_request=per_request,
        per_user=per_user,
        by_length=[
            LengthBucket(f"{_k(b * step)}-{_k((b + 1) * step)}", b * step, (b + 1) * step, g)
            for b, g in sorted(buckets.items())
        ],
    )
    slo = run.scenario.get("slo")
    slo = slo if isinstance(slo, dict) else {}
    timing.ttft_limit = _limit(slo, "ttft_p95")
    timing.itl_limit = _limit(slo, "itl_p95")
    if timing.itl_limit is not None and timing.available:
        _goodput(run, timing, timing.itl_limit)
    return timing


def _goodput(run: RunData, timing: TokenTiming, itl_limit: float) -> None:
    """Goodput (TTFT + ITL), overall and per user, over non-warm-up turns (every outcome)."""
    main = figures.main_requests(run.requests)
    if not main:
        return
    by_user: dict[int, list[bool]] = {}
    good: list[bool] = []
    for r in main:
        rid = r.get("request_id")
        itl = timing.per_request.get(str(rid)) if rid else None
        ok = good_on_ttft_and_itl(r, itl, timing.ttft_limit, itl_limit)
        good.append(ok)
        by_user.setdefault(int(r.get("user") or 0), []).append(ok)
    timing.goodput = sum(good) / len(good)
    timing.goodput_by_user = {u: sum(g) / len(g) for u, g in by_user.items()}
