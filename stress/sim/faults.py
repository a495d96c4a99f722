"""Which request gets which fault, reproducibly.

A fault strikes by rate (a seeded draw per chat request, in arrival order), by request
number, or by simulated time. Every rule draws on every request whether or not an earlier
rule already struck, so the same seed and the same request order give the same faults.
The symptoms themselves are produced by the HTTP layer (``server.py``); this module only
decides.
"""

from __future__ import annotations

import random

from stress.config.sim import FaultRule

# Faults that strike inside a response, after ``after_tokens`` generated tokens.
MID_STREAM = frozenset({"reset", "stall", "malformed_chunk", "no_done", "huge_chunk"})


class FaultPlan:
    def __init__(self, rules: list[FaultRule], seed: int) -> None:
        self.rules = rules
        self._rngs = [random.Random(f"{seed}:{i}:{r.kind}") for i, r in enumerate(rules)]
        # Time-triggered rules (restarts fire on their own timer, see ``timed_restarts``).
        self._times = [[] if r.kind == "restart" else sorted(r.at_seconds) for r in rules]
        self.counts: dict[str, int] = {}

    def draw(self, request_no: int, sim_t: float) -> FaultRule | None:
        """The fault for chat request number ``request_no`` (1-based) arriving at ``sim_t``."""
        chosen: FaultRule | None = None
        for i, rule in enumerate(self.rules):
            hit = request_no in rule.on_requests
            times = self._times[i]
            while times and times[0] <= sim_t:
                times.pop(0)
                hit = True
            if rule.rate > 0.0 and self._rngs[i].random() < rule.rate:
                hit = True
            if hit and chosen is None:
                chosen = rule
        if chosen is not None:
            self.counts[chosen.kind] = self.counts.get(chosen.kind, 0) + 1
        return chosen

    def timed_restarts(self) -> list[tuple[float, FaultRule]]:
        """(simulated time, rule) for every scheduled restart, in time order."""
        out = [(t, r) for r in self.rules if r.kind == "restart" for t in r.at_seconds]
        return sorted(out, key=lambda x: x[0])
