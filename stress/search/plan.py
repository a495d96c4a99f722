"""How long a capacity search can take, worked out from its settings before it starts.

A step is ``repeat`` passes; a pass at N users runs ``rounds`` (stretched for small N,
``runner.step_rounds``) of thinking and a reply, or the scenario's ``duration`` and its
drain. A reply's time is what the SLO allows (``ttft_p95`` plus ``max_tokens`` at
``decode_tok_s_p50``): the steps that meet it are bounded by it, and the search stops
soon after the first that does not. On the simulator the whole pass runs ``time_scale``
times faster than its simulated clock. The steps come from ``steps.most_cost``: the
search's own rules over every sequence of outcomes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from stress.config.scenario import LoadedScenario, Scenario, SearchSpec, ThinkTime
from stress.core.durations import format_duration
from stress.search.steps import Search, most_cost

PASS_OVERHEAD_S = 5.0
"""Allowed for each pass's start (the simulator, the pre-flight) and its report: 2-5 s
measured on a busy 2-core machine."""
EXACT_STARTS = 128
"""A grid's later rows start where the previous row's answer fell: up to this many users,
the bound tries every start; above, it takes a looser bound that needs no search."""


@dataclass(frozen=True, slots=True)
class Reply:
    seconds: float
    basis: str
    """Where the figure comes from: "within the SLO" or "at the simulator's speed"."""


def think_mean(t: ThinkTime) -> float:
    if t.distribution == "uniform":
        return (t.min + t.max) / 2
    return t.mean if t.mean is not None else t.min


def sim_settings(sc: Scenario) -> tuple[float, int | None, float | None]:
    """The simulator's (time scale, longest reply in tokens, decode speed); (1, None,
    None) for a real server."""
    if sc.target.url != "sim":
        return 1.0, None, None
    from stress.config.sim import SimConfig

    cfg = SimConfig.model_validate(sc.target.sim)
    return cfg.time_scale, cfg.reply_tokens_max + cfg.reasoning_tokens, cfg.decode_tokens_per_s


def reply_time(sc: Scenario) -> Reply | None:
    """One reply's time on the scenario's clock, or None when nothing bounds it (no decode
    figure in the SLO, and a real server)."""
    _, longest, sim_decode = sim_settings(sc)
    tokens = min(sc.request.max_tokens, longest or sc.request.max_tokens)
    decode = sc.slo.decode_tok_s_p50
    if decode is not None:
        return Reply((sc.slo.ttft_p95 or 0.0) + tokens / decode, "within the SLO")
    if sim_decode is not None:
        return Reply((sc.slo.ttft_p95 or 0.0) + tokens / sim_decode, "at the simulator's speed")
    return None


def pass_seconds(sc: Scenario, rounds: int | None, reply: Reply | None) -> float | None:
    """A pass's wall time: its rounds, or its duration and drain, whichever ends first."""
    scale = sim_settings(sc)[0]
    options: list[float] = []
    if sc.duration is not None:
        options.append(sc.duration + sc.timeouts.drain)
    if rounds is not None and reply is not None:
        think = think_mean(sc.users.think_time)
        options.append(sc.users.ramp_up + rounds * reply.seconds + (rounds - 1) * think)
    return min(options) / scale if options else None


@dataclass(frozen=True, slots=True)
class Estimate:
    steps: int
    repeat: int
    passes_max: int
    """The most passes a step runs while it is UNDECIDED (the bound counts them all)."""
    shortest_s: float | None
    longest_s: float | None
    total_s: float | None
    rounds: tuple[int, int] | None
    """The fewest and most rounds a user runs in a pass (None: the pass has a duration)."""
    reply: Reply | None
    think_s: float
    scale: float
    stretched: bool = False
    """The most rounds are a 1-user pass's, stretched for ``min_requests``."""

    def line(self) -> str:
        """The one line the search prints before its first pass."""
        passes = (
            f"{self.repeat}-{self.passes_max}" if self.passes_max > self.repeat else self.repeat
        )
        head = f"expected duration: at most {self.steps} steps x {passes} passes"
        if self.longest_s is None or self.shortest_s is None:
            return head + f"; a pass: {self._pass_text()} (replies not bounded: no decode SLO)"
        span = format_duration(self.longest_s + PASS_OVERHEAD_S)
        if round(self.shortest_s) != round(self.longest_s):
            span = f"{format_duration(self.shortest_s + PASS_OVERHEAD_S)}-{span}"
        total = format_duration(self.total_s or 0.0)
        if self.passes_max > self.repeat and self.total_s:
            decided = self.total_s * self.repeat / self.passes_max
            total += (
                f" ({format_duration(decided)} if every step is decided in its first "
                f"{self.repeat} passes)"
            )
        basis = self.reply.basis if self.reply else ""
        return f"{head}; a pass {span} ({self._pass_text()}); in all at most {total}" + (
            " while replies stay within the SLO" if basis == "within the SLO" else ""
        )

    def _pass_text(self) -> str:
        parts: list[str] = []
        if self.rounds is not None:
            lo, hi = self.rounds
            most = f", {hi} at 1 user" if self.stretched else ""
            parts.append(f"{lo}-{hi} rounds a user{most}" if lo != hi else f"{hi} rounds a user")
            think = f"{format_duration(self.think_s)} thinking + " if self.think_s else ""
            reply = "a reply"
            if self.reply is not None:
                bound = "<= " if self.reply.basis == "within the SLO" else "~"
                reply += f" {self.reply.basis}, {bound}{format_duration(self.reply.seconds)}"
            parts.append(f"a round: {think}{reply}")
        else:
            parts.append("the scenario's duration and drain")
        if self.scale != 1:
            parts.append(f"the simulator's clock x{self.scale:g}")
        parts.append(f"+ {PASS_OVERHEAD_S:g}s to start and report")
        return "; ".join(parts)


def estimate(
    loaded: LoadedScenario,
    spec: SearchSpec,
    first: Search,
    rows: list[int | None],
    rounds_at: Callable[[int, int | None], int | None],
) -> Estimate:
    """The bound for ``first`` (the search's first row) and ``rows`` (the lengths a grid
    maps; [None] otherwise); ``rounds_at(users, start_tokens)``: a pass's rounds."""
    sc = loaded.scenario
    reply = reply_time(sc)
    length_axis = spec.axis == "length"

    def users_tokens(v: int, length: int | None) -> tuple[int, int | None]:
        return (sc.users.count, v) if length_axis else (v, length)

    def cost(v: int) -> float:
        t = pass_seconds(sc, rounds_at(*users_tokens(v, rows[0])), reply)
        return spec.passes_max * ((t or 0.0) + PASS_OVERHEAD_S)

    steps = int(most_cost(first, lambda v: 1.0, uniform=True))
    total = most_cost(first, cost, uniform=length_axis)
    # a grid's later rows, and each row's SLO tier searches (each goes on from wherever
    # its row's steps leave it), bound like a row started anywhere
    more = len(rows) - 1 + len(rows) * len(sc.slo.tiers)
    if more:
        more_steps, more_cost = later_rows(spec, cost)
        steps += more * more_steps
        total += more * more_cost
    ends = [1 if not length_axis else first.start, first.maximum]  # the longest, the shortest
    counts = [rounds_at(*users_tokens(v, rows[0])) for v in ends]
    known = [t for n in counts if (t := pass_seconds(sc, n, reply)) is not None]
    rounds = [n for n in counts if n is not None]
    return Estimate(
        steps=steps,
        repeat=spec.repeat,
        passes_max=spec.passes_max,
        shortest_s=min(known) if known else None,
        longest_s=max(known) if known else None,
        total_s=total if known else None,
        rounds=(min(rounds), max(rounds)) if len(rounds) == len(counts) else None,
        stretched=not length_axis and bool(rounds) and rounds[0] != sc.rounds,
        reply=reply,
        think_s=think_mean(sc.users.think_time),
        scale=sim_settings(sc)[0],
    )


def later_rows(spec: SearchSpec, cost: Callable[[int], float]) -> tuple[int, float]:
    """The most steps and cost of a grid row after the first, which starts at whatever
    user count the row before it answered."""

    def row(start: int) -> Search:
        return Search(start, spec.factor, spec.max_users, spec.width)

    def one(v: int) -> float:
        return 1.0

    if spec.max_users <= EXACT_STARTS:
        starts = range(1, spec.max_users + 1)
        steps = max(most_cost(row(s), one, uniform=True) for s in starts)
        return int(steps), max(most_cost(row(s), cost) for s in starts)
    # growth from any start takes no more steps than from 1 user; halving below a start
    # takes at most log2(max_users) + 1; a bisection at most that of the widest bracket
    grow = most_cost(Search(1, spec.factor, spec.max_users, spec.max_users), one)
    halve = 1 + math.floor(math.log2(spec.max_users))
    widest = bisect_steps(spec.max_users - 1, spec.width)
    steps = int(max(grow, halve) + widest)
    return steps, steps * cost(1)


def bisect_steps(gap: int, width: int) -> int:
    """Steps a bisection takes to narrow a bracket ``gap`` users wide to ``width``."""
    n = 0
    while gap > width:
        gap -= gap // 2
        n += 1
    return n
