"""The capacity search's logic: which user count to try next, and when to stop.

Pure (no I/O, no runs), so the search is tested on its own and the runner only executes
what it is told. The search grows the user count geometrically from ``start`` until a step
misses the SLO (or ``maximum`` is reached), then bisects between the last step that met
it and the first that missed, until the bracket is ``width`` users wide:

    1 MET, 2 MET, 4 MET, 8 MISSED -> 6 MET -> 7 MISSED: capacity 6 users [6-7]

A step is decided sequentially (``decide``): its passes' SLO factors, on a log scale, give
an interval at the search's confidence; the step is MET when the interval lies below the
limit, MISSED when above, and otherwise runs another pass, up to ``max_repeat``, after
which it is UNDECIDED: the SLO sits inside the pass-to-pass spread there. The path treats
an UNDECIDED step like a missed one (the capacity is stated only where it was decided)
and the answer names it. A step that fails the run's health (a hang, a restart, errors
above ``slo.error_rate``) counts as missed at once; a hang also stops the search (a
server that hangs at N users has answered the question). A step whose passes have fewer
than ``MIN_SAMPLES`` requests cannot be judged: the search stops and says to lengthen the
steps, rather than guess.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from stress.analysis.stats import t_critical

StepStatus = Literal["MET", "MISSED", "UNDECIDED", "NOT JUDGED", "INTERRUPTED", "SERVER LOST"]
"""INTERRUPTED and SERVER LOST: a step the search did not finish (Ctrl-C, the server went
away); neither is judged, so neither moves the bracket."""
StopReason = Literal["bracket", "maximum", "hang", "not_judged", "missed_at_start"]


@dataclass(slots=True)
class Step:
    """One value of the axis (a user count or a history length), tried ``repeat`` times;
    filled in by the runner."""

    value: int
    """The axis value tried: users, or tokens of history (``Search.unit``)."""
    status: StepStatus = "NOT JUDGED"
    factors: list[float] = field(default_factory=list)
    """The worst SLO factor of each pass (above 1: missed)."""
    reasons: list[str] = field(default_factory=list)
    """Why a pass missed besides the SLO (health findings), in a few words each."""
    hang: bool = False
    run_dirs: list[str] = field(default_factory=list)
    conversation_tokens: int = 0
    """The longest conversation any pass reached (tokens)."""
    limit: str = ""
    """The heaviest cause the passes' analysis named ("a KV pool smaller than ...")."""
    slots: int = 0
    """llama.cpp: the server's slots (the probe's), which bound the search; 0 otherwise."""
    slot_context: int = 0
    checks: list[str] = field(default_factory=list)
    """Each pass's SLO figures as judged ("TTFT p95 0.31 s [0.28-0.35] vs SLO 0.4 s: MET")."""
    length: int = 0
    """The history each conversation opened with (``conversation.start_tokens``; 0: none)."""


@dataclass(slots=True)
class Search:
    start: int = 1
    factor: float = 2.0
    maximum: int = 64
    width: int = 1
    unit: str = "users"
    """What the values count: "users" or "tokens" (the length axis)."""
    steps: list[Step] = field(default_factory=list)
    stop: StopReason | None = None
    bound: str = ""
    """Why ``maximum`` is lower than asked (e.g. a llama.cpp slot's context), or ""."""

    def __post_init__(self) -> None:
        if not (1 <= self.start <= self.maximum) or self.factor <= 1 or self.width < 1:
            raise ValueError("search needs 1 <= start <= maximum, factor > 1, width >= 1")

    @property
    def met(self) -> Step | None:
        """The largest step that met the SLO below the smallest that missed."""
        missed = self.missed
        good = [
            s
            for s in self.steps
            if s.status == "MET" and (missed is None or s.value < missed.value)
        ]
        return max(good, key=lambda s: s.value, default=None)

    @property
    def missed(self) -> Step | None:
        """The smallest step that missed, or that could not be decided (UNDECIDED): the
        bracket's upper end, since the capacity is stated only where it was decided."""
        bad = [s for s in self.steps if s.status in ("MISSED", "UNDECIDED")]
        return min(bad, key=lambda s: s.value, default=None)

    @property
    def undecided(self) -> list[Step]:
        """The steps whose passes left the SLO inside their spread."""
        return sorted((s for s in self.steps if s.status == "UNDECIDED"), key=lambda s: s.value)

    def next_value(self) -> int | None:
        """The user count to try next; None when the search has its answer (``stop``)."""
        if self.stop is not None:
            return None
        if not self.steps:
            return self.start
        last = self.steps[-1]
        if last.hang:
            self.stop = "hang"
            return None
        if last.status == "NOT JUDGED":
            self.stop = "not_judged"
            return None
        lo, hi = self.met, self.missed
        if hi is None:  # still growing
            assert lo is not None
            if lo.value >= self.maximum:
                self.stop = "maximum"
                return None
            return min(self.maximum, max(lo.value + 1, round(lo.value * self.factor)))
        if lo is None:  # missed at the fewest users tried: look below
            below = hi.value // 2
            if below < 1 or below in self._tried:
                self.stop = "missed_at_start"
                return None
            return below
        if hi.value - lo.value <= self.width:
            self.stop = "bracket"
            return None
        return (lo.value + hi.value) // 2

    @property
    def _tried(self) -> set[int]:
        return {s.value for s in self.steps}

    def fmt(self, v: int) -> str:
        """'6 users', '12k tokens'."""
        if self.unit == "tokens":
            return f"{v / 1000:g}k tokens" if v >= 1000 else f"{v} tokens"
        return f"{v} user{'' if v == 1 else 's'}"

    def answer(self, note: bool = True) -> str:
        """'6 users [6-7]', '>= 64 users (...)', or why there is no answer; with ``note``
        the undecided steps follow (``undecided_note``)."""
        lo, hi = self.met, self.missed
        if self.stop == "not_judged":
            return "no answer: a step had too few requests to judge (lengthen search steps)"
        if lo is None:
            where = f" at {self.fmt(hi.value)}" if hi else ""
            return f"no capacity found: the SLO was missed{where}, the least tried"
        if hi is None:
            return f">= {self.fmt(lo.value)} (the SLO held up to the most tried)"
        bracket = f"[{self.fmt(lo.value).split()[0]}-{self.fmt(hi.value).split()[0]}]"
        return f"{self.fmt(lo.value)} {bracket}{self.undecided_note() if note else ''}"

    def undecided_note(self) -> str:
        """'; UNDECIDED at 18 users: the SLO sits inside the pass-to-pass spread (x0.98-x1.03
        over 6 passes)', or ''."""
        if not self.undecided:
            return ""
        where = ", ".join(
            f"{self.fmt(s.value)} (x{min(s.factors):.3g}-x{max(s.factors):.3g} over "
            f"{len(s.factors)} passes)"
            for s in self.undecided
            if s.factors
        )
        return f"; UNDECIDED at {where}: the SLO sits inside the pass-to-pass spread there"


def most_cost(search: Search, cost: Callable[[int], float], uniform: bool = False) -> float:
    """The most a search that has not started can spend, over every sequence of outcomes,
    when a step at ``v`` costs ``cost(v)``; at a cost of 1 a step, the most steps. A hang
    or a step that cannot be judged only ends it sooner. It follows ``next_value``: growth
    until a miss, then bisection, or halving below a first step that missed. ``uniform``:
    every value costs the same, so a bisection's cost depends on its width alone."""
    width, top = search.width, search.maximum

    @functools.cache
    def split(lo: int, hi: int) -> float:  # met at lo, missed at hi
        if hi - lo <= width:
            return 0.0
        mid = (lo + hi) // 2
        return cost(mid) + max(split(mid, hi), split(lo, mid))

    def bisect(lo: int, hi: int) -> float:
        return split(0, hi - lo) if uniform else split(lo, hi)

    def below(h: int) -> float:  # missed at h, nothing met yet
        spent = worst = 0.0
        while (b := h // 2) >= 1:
            spent += cost(b)
            worst = max(worst, spent + bisect(b, h))
            h = b
        return max(worst, spent)

    value, prev, spent, worst = search.start, 0, 0.0, 0.0
    while True:
        spent += cost(value)
        worst = max(worst, spent + (bisect(prev, value) if prev else below(value)))
        if value >= top:
            return max(worst, spent)
        prev, value = value, min(top, max(value + 1, round(value * search.factor)))


Decision = Literal["MET", "MISSED", "UNDECIDED"]


def decide(factors: Sequence[float], confidence: float, passes_max: int) -> Decision:
    """A step's status from its passes' worst SLO factors (above 1: missed) so far.

    The mean of log(factor) over the passes with a Student t interval at ``confidence``:
    MET when the whole interval is below 0 (the limit), MISSED when above. A single pass
    decides alone only when the search allows one pass a step (``passes_max`` 1); else
    one pass, or an interval that holds the limit, is UNDECIDED (the caller runs another
    pass while it may)."""
    if passes_max == 1 and len(factors) == 1:
        return "MISSED" if factors[0] > 1.0 else "MET"
    if len(factors) < 2:
        return "UNDECIDED"
    logs = [math.log(max(f, 1e-9)) for f in factors]
    mean = statistics.fmean(logs)
    t = t_critical(len(logs) - 1, confidence)
    half = t * statistics.stdev(logs) / math.sqrt(len(logs))
    if mean + half < 0.0:
        return "MET"
    if mean - half > 0.0:
        return "MISSED"
    return "UNDECIDED"


CLIFF_RATIO = 2.0
"""A factor that at least doubles between two tried values the search's width apart marks
the boundary as a cliff (a slot or pool limit), not a slope."""


@dataclass(frozen=True, slots=True)
class Boundary:
    """Where a monotone fit over every judged step's SLO margin crosses the limit."""

    value: float
    """The interpolated axis value at factor 1."""
    below: tuple[int, float]
    """(value, fitted factor) of the fitted step just below the crossing."""
    above: tuple[int, float]
    cliff: bool

    def text(self, fmt: Callable[[int], str]) -> str:
        unit = fmt(2).split()[-1]
        line = (
            f"a monotone fit over every step puts the limit at ~{self.value:.3g} {unit} "
            f"(x{self.below[1]:.3g} at {self.below[0]}, x{self.above[1]:.3g} at {self.above[0]})"
        )
        if self.cliff:
            line += "; a cliff: the SLO factor jumps, the boundary is a discontinuity"
        return line


def _isotonic(points: list[tuple[int, float, int]]) -> list[float]:
    """Pool-adjacent-violators: the non-decreasing fit of (value, y, weight) by value."""
    blocks: list[list[float]] = []  # [sum of w*y, sum of w, count]
    for _, y, w in points:
        blocks.append([w * y, float(w), 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            last = blocks.pop()
            blocks[-1] = [a + b for a, b in zip(blocks[-1], last, strict=True)]
    out: list[float] = []
    for total, weight, count in blocks:
        out += [total / weight] * int(count)
    return out


def boundary(search: Search) -> Boundary | None:
    """The crossing of factor 1 by a non-decreasing fit of each judged step's mean
    log(factor) (weighted by its passes) against the axis value; None when every fitted
    step is on one side of the limit."""
    judged = sorted(
        (s for s in search.steps if s.status in ("MET", "MISSED", "UNDECIDED") and s.factors),
        key=lambda s: s.value,
    )
    points = [
        (s.value, statistics.fmean(math.log(max(f, 1e-9)) for f in s.factors), len(s.factors))
        for s in judged
    ]
    fit = _isotonic(points)
    for i in range(1, len(points)):
        y0, y1 = fit[i - 1], fit[i]
        if y0 < 0.0 <= y1:
            v0, v1 = points[i - 1][0], points[i][0]
            at = v0 + (v1 - v0) * (0.0 - y0) / (y1 - y0) if y1 > y0 else float(v1)
            cliff = v1 - v0 <= search.width and math.exp(y1 - y0) >= CLIFF_RATIO
            return Boundary(at, (v0, math.exp(y0)), (v1, math.exp(y1)), cliff)
    return None
