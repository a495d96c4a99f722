"""Open-loop arrival rates over time: a base rate and steps that change it.

Both the scenario (when sessions arrive) and the analysis (what rate a finished run was
offered, read from its manifest) use these, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Sequence


def rate_at(
    rate: float, steps: Sequence[tuple[float, float]], t: float
) -> tuple[float, float | None]:
    """The rate (per minute) at ``t`` seconds into the run, given the base ``rate`` and
    ``steps`` of (from when, rate) in order, and when it next changes (None: never)."""
    until = None
    for at, step_rate in steps:
        if at > t:
            until = at
            break
        rate = step_rate
    return rate, until


def mean_rate(rate: float, steps: Sequence[tuple[float, float]], window_s: float) -> float:
    """The scheduled rate averaged over the first ``window_s`` seconds (per minute)."""
    if window_s <= 0 or not steps:
        return rate
    total, t = 0.0, 0.0
    while t < window_s:
        now, until = rate_at(rate, steps, t)
        end = window_s if until is None else min(until, window_s)
        total += now * (end - t)
        t = end
    return total / window_s
