"""Server-wide pauses: moments when every stream that was running went silent together.

A slow stream is one request's problem; a silence that every running stream shares at the
same moment is the server stopping, whatever each stream was doing (llama.cpp copying a
slot's old prompt into its host-RAM prompt cache at a slot start does this). Found from
``tokens.bin`` (``stress.store.token_times``) joined to ``requests.jsonl``: a chunk of
request ``r`` arrived at ``t_start + cumsum(values)``.

A stream is *running* between its first and its last text chunk, every request that has a
frame counted (warm-up and failed ones too: the server froze them all the same). A pause
is an interval between two consecutive chunk arrivals of the whole run, longer than the
threshold, across which at least ``MIN_STREAMS`` streams were running. The threshold is
``max(MIN_PAUSE_S, ITL_MULTIPLE x the run's ITL p50)``: a shared silence of a second is
already far outside decoding (ITL is tens of ms), and a slow server's own ITL does not
read as pauses. That p50 is token timing's own (``stress.analysis.itl``): the same
population's gaps, counted once.

The file is read once for both: ``stress.analysis.itl.read_tokens`` streams the frames and
hands each to ``Streams.place`` here. Memory is bounded by requests, not chunks: each
stream keeps its first and last chunk time and only its gaps over ``MIN_PAUSE_S`` (a pause
lies inside one such gap of every stream it froze). The pauses are then a sweep over
those intervals: a moment is paused when the running streams all sit inside one of
their long gaps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

from stress.analysis.loghist import LogHistogram
from stress.analysis.rundata import Record, RunData
from stress.core.fmt import num, pct
from stress.store.token_times import FILE_NAME, ReadReport, read_frames

MIN_PAUSE_S = 1.0
"""The shortest shared silence called a pause, whatever the run's ITL."""
ITL_MULTIPLE = 10.0
"""A pause is also longer than this many times the run's ITL p50."""
MIN_STREAMS = 2
"""Fewest running streams a shared silence needs (one stream alone is just slow)."""
LISTED = 100
"""At most this many pauses (the longest, in time order) are listed in summary.json."""


@dataclass(frozen=True, slots=True)
class Pause:
    """One server-wide pause: when (run seconds) and how many running streams it froze."""

    start: float
    end: float
    streams: int

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class Pauses:
    """The run's server-wide pauses (``available``: the run has token timing)."""

    available: bool
    threshold_s: float
    itl_p50_s: float | None
    pauses: tuple[Pause, ...]
    run_s: float
    """The run's duration: the denominator of ``share``."""
    stream_s: float
    """Seconds of streams running (first to last chunk), summed over streams."""

    @property
    def count(self) -> int:
        return len(self.pauses)

    @property
    def total_s(self) -> float:
        return sum(p.seconds for p in self.pauses)

    @property
    def longest_s(self) -> float | None:
        return max((p.seconds for p in self.pauses), default=None)

    @property
    def share(self) -> float | None:
        """Share of the run spent in pauses."""
        return self.total_s / self.run_s if self.run_s > 0 and self.available else None

    @property
    def frozen_stream_s(self) -> float:
        """Stream-seconds frozen: each pause's length times the streams it froze."""
        return sum(p.seconds * p.streams for p in self.pauses)

    @property
    def decode_share(self) -> float | None:
        """Share of the streams' running time (first to last chunk) spent frozen."""
        return self.frozen_stream_s / self.stream_s if self.stream_s > 0 else None

    def as_dict(self) -> dict[str, Any]:
        """``summary.json``'s ``server_pauses`` section."""
        longest = sorted(self.pauses, key=lambda p: -p.seconds)[:LISTED]
        frozen = [p.streams for p in self.pauses]
        return {
            "available": self.available,
            "threshold_s": self.threshold_s,
            "itl_p50_s": self.itl_p50_s,
            "count": self.count,
            "total_s": self.total_s,
            "longest_s": self.longest_s,
            "share_of_run": self.share,
            "streams_frozen": {
                "min": min(frozen, default=None),
                "max": max(frozen, default=None),
                "mean": sum(frozen) / len(frozen) if frozen else None,
            },
            "frozen_stream_s": self.frozen_stream_s,
            "decode_share": self.decode_share,
            "pauses": [
                {"start_s": p.start, "end_s": p.end, "seconds": p.seconds, "streams": p.streams}
                for p in sorted(longest, key=lambda p: p.start)
            ],
            "pauses_listed": min(self.count, LISTED),
        }


@dataclass(slots=True)
class Streams:
    """What the pass over ``tokens.bin`` keeps for the pauses: each stream's span and its
    long gaps. ``requests``: the requests not placed yet by id (warm-up and failed ones
    ran too), the records themselves, each let go when placed: the pass holds no more
    per request than it keeps."""

    requests: dict[str, Record]
    spans: list[tuple[float, float]] = field(default_factory=list)
    gaps: list[tuple[float, float]] = field(default_factory=list)

    @classmethod
    def of(cls, requests: Sequence[Record]) -> Streams:
        """The streams of ``requests``, none placed yet (a repeated id: its last record)."""
        return cls({str(r["request_id"]): r for r in requests if r.get("request_id")})

    def place(
        self,
        rid: str,
        v: npt.NDArray[np.float64],
        cum: npt.NDArray[np.float64],
        whole: bool,
        longest: float,
    ) -> Record | None:
        """Place one frame: ``v`` its values on the run's clock, ``cum`` their running sum,
        ``whole`` every value finite and no gap negative, ``longest`` its longest gap. The
        first frame with chunks of a known request counts; a damaged one places nothing.
        Returns the request placed, None if none: its gaps are the pause bar's when ITL's
        population holds it (``placed_itl_p50``), so the caller sees whether ITL's figures
        counted the same ones."""
        row = self.requests.pop(rid, None) if v.size else None
        if row is None or not whole:  # unknown, placed already, no chunk, or damaged
            return None
        t0 = float(row.get("t_start") or 0.0)
        self.spans.append((float(t0 + cum[0]), float(t0 + cum[-1])))
        if longest > MIN_PAUSE_S:  # a few streams: the rest skip the search
            times = t0 + cum
            for i in np.flatnonzero(v[1:] > MIN_PAUSE_S):
                self.gaps.append((float(times[i]), float(times[i + 1])))
        return row


def shared_silences(
    spans: Iterable[tuple[float, float]], gaps: Iterable[tuple[float, float]], threshold: float
) -> list[Pause]:
    """The intervals longer than ``threshold`` in which at least ``MIN_STREAMS`` streams
    were running (inside a span) and every one of them was silent (inside one of its gaps
    longer than ``threshold``). Every boundary is a chunk's arrival, so each elementary
    interval of the sweep is the gap between two consecutive chunks of the run."""
    events: dict[float, list[int]] = {}
    for a, b in spans:
        if b > a:
            events.setdefault(a, [0, 0])[0] += 1
            events.setdefault(b, [0, 0])[0] -= 1
    for a, b in gaps:
        if b - a > threshold:
            events.setdefault(a, [0, 0])[1] += 1
            events.setdefault(b, [0, 0])[1] -= 1
    times = sorted(events)
    running = silent = 0
    out: list[Pause] = []
    for t, t_next in pairwise(times):
        running += events[t][0]
        silent += events[t][1]
        if running >= MIN_STREAMS and silent == running and t_next - t > threshold:
            out.append(Pause(t, t_next, running))
    return out


def threshold_for(itl_p50: float | None) -> float:
    """The pause threshold: ``max(MIN_PAUSE_S, ITL_MULTIPLE x ITL p50)``."""
    return max(MIN_PAUSE_S, ITL_MULTIPLE * itl_p50) if itl_p50 is not None else MIN_PAUSE_S


def found_pauses(
    run: RunData, streams: Streams, report: ReadReport, itl_p50: float | None
) -> Pauses:
    """The run's pauses from the placed ``streams`` and the bar's ITL p50."""
    threshold = threshold_for(itl_p50)
    return Pauses(
        available=report.frames > 0,
        threshold_s=threshold,
        itl_p50_s=itl_p50,
        pauses=tuple(shared_silences(streams.spans, streams.gaps, threshold)),
        run_s=run.duration_s,
        stream_s=sum(b - a for a, b in streams.spans),
    )


def placed_itl_p50(run: RunData, in_itl: Callable[[Record], bool]) -> float | None:
    """The ITL p50 of the gaps of the frames ``Streams.place`` places, of requests in ITL's
    population. Equal to token timing's own p50 unless a frame is damaged (a value not
    finite, a negative gap: token timing leaves out only those values, the pauses the
    whole frame) or an id repeats: then the file is read again here, so the threshold
    stays what it always was. One histogram add a frame: a rare, damaged file."""
    by_id = {str(r["request_id"]): r for r in run.requests if r.get("request_id")}
    seen: set[str] = set()
    itl = LogHistogram()
    scale = run.files.time_scale
    for rid, values in read_frames(run.path / FILE_NAME):
        row = by_id.get(rid)
        if row is None or rid in seen or not values.size:
            continue
        seen.add(rid)
        v = values.astype(np.float64) * scale
        if np.isfinite(v).all() and not (v[1:] < 0).any() and in_itl(row):
            itl.add(v[1:])
    return itl.percentile(50)


def frozen_in(pauses: Sequence[Pause], a: float, b: float) -> float:
    """Seconds of ``[a, b]`` that fall inside pauses (which never overlap)."""
    return sum(max(0.0, min(b, p.end) - max(a, p.start)) for p in pauses)


def describe_pauses(p: Pauses) -> str:
    """One sentence of the pauses' figures, for the report and the cause."""
    frozen = [x.streams for x in p.pauses]
    streams = f"{min(frozen)}" if min(frozen) == max(frozen) else f"{min(frozen)} to {max(frozen)}"
    share = f" ({pct(p.share)} of the run)" if p.share is not None else ""
    return (
        f"{p.count:,} server-wide pause{'s' if p.count != 1 else ''}, {num(p.total_s)} s in "
        f"all{share}, the longest {num(p.longest_s)} s: every running stream ({streams} "
        f"at a time) went silent together for over {num(p.threshold_s)} s"
    )
