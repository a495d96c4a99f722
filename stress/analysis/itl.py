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

The file is read once a run for these figures and the server-wide pauses together
(``read_tokens``): each frame, streamed, feeds this module's groups and per-request figures
and ``stress.analysis.pauses.Streams`` (each stream's span and long gaps), and the pauses'
threshold takes this ITL p50. Memory stays bounded: one frame read at a time, the gaps
added to the histograms in batches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from stress.analysis import figures
from stress.analysis.figures import Record, conv_len, token_step
from stress.analysis.loghist import LogHistogram
from stress.analysis.pauses import Pauses, Streams, found_pauses, placed_itl_p50
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
    TTFT, the rest its gaps); a damaged gap (not finite, negative) is left out."""
    gaps = np.asarray(values[1:], dtype=np.float64)
    gaps = gaps[np.isfinite(gaps) & (gaps >= 0.0)]
    return _request_figures(len(values), gaps, sorted(gaps.tolist()))


def _request_figures(
    chunks: int, gaps: npt.NDArray[np.float64], ordered: list[float]
) -> RequestItl:
    """``RequestItl`` of ``gaps`` (``ordered``: them sorted, a few µs where np.percentile's
    set-up took ~60 a request). The mean is ``gaps.mean()`` bit for bit (numpy's own sum
    over the count) without its ~4 µs of set-up a request."""
    if not ordered:
        return RequestItl(chunks, None, None, None, None)
    p50, p95 = [figures.percentile_sorted(ordered, q) for q in ITL_QUANTILES]
    mean = float(np.add.reduce(gaps)) / len(ordered)
    return RequestItl(chunks, mean, p50, p95, ordered[-1])


def _shape(
    v: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], list[float], bool]:
    """A frame's running sum (each chunk's time after the send), its gaps sorted, and
    whether it is whole: every value finite and no gap negative (the pauses place only a
    whole frame, ITL leaves a damaged one's bad values out; its gaps are not sorted here).
    A value that is not finite leaves the running sum so, hence the one check; a sum that
    overflowed is checked value by value."""
    cum = np.cumsum(v)
    if not v.size:
        return cum, [], True
    if not math.isfinite(cum[-1]) and not np.isfinite(v).all():
        return cum, [], False
    ordered = sorted(v[1:].tolist())
    return cum, ordered, not ordered or ordered[0] >= 0.0


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


@dataclass(slots=True)
class _Population:
    """ITL's population before the frames: its groups, each request's three of them by
    id (a repeated id: its last record), and the length buckets' width. The groups are
    found once a request, here, not again per frame; the requests of one user and bucket
    share one tuple of them."""

    overall: Group = field(default_factory=Group)
    per_user: dict[int, Group] = field(default_factory=dict)
    buckets: dict[int, Group] = field(default_factory=dict)
    step: int = 1
    groups_of: dict[str, tuple[Group, Group, Group]] = field(default_factory=dict)
    _held: dict[tuple[int, int], tuple[Group, Group, Group]] = field(default_factory=dict)

    @classmethod
    def of(cls, run: RunData) -> _Population:
        """Every population request counted in its groups, with its TPOT."""
        rows = [r for r in run.requests if in_population(r)]
        top = max((conv_len(r) for r in rows), default=0.0)
        pop = cls(step=token_step(top) if top > 0 else 1)  # the capacity answer's buckets
        for r in rows:
            groups = pop._groups(r)
            if r.get("request_id"):
                pop.groups_of[str(r["request_id"])] = groups
            t = tpot(r)
            for g in groups:
                g.requests += 1
                if t is not None:
                    g.tpot.append(t)
        return pop

    def _groups(self, r: Record) -> tuple[Group, Group, Group]:
        """Its groups, a new one made only for a new user or bucket (``setdefault`` made
        two a call, each with its 8 KiB of bins, almost all thrown away)."""
        key = (int(r.get("user") or 0), int(conv_len(r) // self.step))
        held = self._held.get(key)
        if held is None:
            u = self.per_user.get(key[0])
            if u is None:
                u = self.per_user[key[0]] = Group()
            b = self.buckets.get(key[1])
            if b is None:
                b = self.buckets[key[1]] = Group()
            held = self._held[key] = (self.overall, u, b)
        return held


class _Pass:
    """The one pass over ``tokens.bin``: each frame feeds ITL's groups and per-request
    figures, and the pauses' streams (``stress.analysis.pauses.Streams``), from one
    conversion, one running sum and one sort of its gaps."""

    def __init__(self, run: RunData, pop: _Population) -> None:
        self.scale = run.files.time_scale
        self.groups_of = pop.groups_of
        self.streams = Streams.of(run.requests)
        self.per_request: dict[str, RequestItl] = {}
        self.batches = _Batches()
        self.diverged = False
        """A frame's gaps count in ITL and not in the pause bar, or the other way round."""

    def frame(self, rid: str, values: npt.NDArray[np.float32]) -> None:
        """Feed one frame (``values`` as read, wall seconds) to both readers, on the run's
        clock, and note when they would count its gaps differently."""
        v = values.astype(np.float64)
        if self.scale != 1.0:
            v *= self.scale
        cum, ordered, whole = _shape(v)
        groups = self.groups_of.get(rid)
        counted = groups is not None and rid not in self.per_request
        if counted and groups is not None:  # else warm-up, failed, or a repeated frame
            itl = _request_figures(v.size, v[1:], ordered) if whole else request_itl(v)
            self.per_request[rid] = itl
            self.batches.add(groups, (values if self.scale == 1.0 else v)[1:])
        placed = self.streams.place(rid, v, cum, whole, ordered[-1] if ordered else 0.0)
        in_bar = placed is not None and in_population(placed)
        if counted != in_bar and v.size > 1:
            self.diverged = True


def _pass(run: RunData) -> tuple[_Population, _Pass, ReadReport]:
    """The one pass over ``tokens.bin``, streamed (one frame at a time), every batch of
    gaps added to its histograms by its end."""
    pop = _Population.of(run)
    report = ReadReport()
    one = _Pass(run, pop)
    for rid, values in read_frames(run.path / FILE_NAME, report):
        one.frame(rid, values)
    one.batches.flush()
    return pop, one, report


def _read(run: RunData) -> tuple[TokenTiming, Pauses]:
    """Both readers' figures from the one pass; a run without ``tokens.bin`` gets TPOT
    only and no pauses."""
    pop, one, report = _pass(run)
    step = pop.step
    timing = TokenTiming(
        available=report.frames > 0,
        read=report,
        overall=pop.overall,
        per_request=one.per_request,
        per_user=pop.per_user,
        by_length=[
            LengthBucket(f"{_k(b * step)}-{_k((b + 1) * step)}", b * step, (b + 1) * step, g)
            for b, g in sorted(pop.buckets.items())
        ],
    )
    slo = run.scenario.get("slo")
    slo = slo if isinstance(slo, dict) else {}
    timing.ttft_limit = _limit(slo, "ttft_p95")
    timing.itl_limit = _limit(slo, "itl_p95")
    if timing.itl_limit is not None and timing.available:
        _goodput(run, timing, timing.itl_limit)
    # the pause bar's gaps are ITL's own unless a frame was damaged or repeated
    p50 = placed_itl_p50(run, in_population) if one.diverged else pop.overall.itl.percentile(50)
    return timing, found_pauses(run, one.streams, report, p50)


_LAST: list[tuple[RunData, tuple[int, int], TokenTiming, Pauses]] = []
"""The last run's figures: the causes, the summary and the report ask for them in one
analysis, and the file is read once (the run is held so that ``is`` is a sound key)."""


def read_tokens(run: RunData) -> tuple[TokenTiming, Pauses]:
    """The run's token timing and server-wide pauses, from ``tokens.bin`` read once per
    run (the file's size and mtime tell a rewritten one)."""
    try:
        st = (run.path / FILE_NAME).stat()
        key = (st.st_size, st.st_mtime_ns)
    except OSError:
        key = (-1, -1)
    for held, held_key, timing, pauses in _LAST:
        if held is run and held_key == key:
            return timing, pauses
    timing, pauses = _read(run)
    _LAST[:] = [(run, key, timing, pauses)]
    return timing, pauses


def token_timing(run: RunData) -> TokenTiming:
    """The run's token timing figures (``read_tokens``); a run without ``tokens.bin`` gets
    TPOT only."""
    return read_tokens(run)[0]


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


def server_pauses(run: RunData) -> Pauses:
    """The run's server-wide pauses (``stress.analysis.pauses``; a run without
    ``tokens.bin``: ``available`` False, none found), from the one pass over the file that
    token timing makes, read once per run (``read_tokens``)."""
    return read_tokens(run)[1]
