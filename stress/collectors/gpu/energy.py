"""Energy from counters read often, never from two reads far apart.

Average power from an energy counter read at the start and end of a 30-minute test said
93 W; summing one-second increments said 242 W (field notes, trap 11): counters wrap and
reset (a driver reload starts NVML's mJ counter again from zero), and a single delta over a
reset is garbage. This accumulator sums increments per sample, treats a counter that goes
backwards as a wrap (when the wrap point is known and the wrapped increment is plausible)
or a reset, and bridges any interval it cannot trust, or a card with no counter at all, by
integrating the power readings (trapezoid). It says which source the total came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

EnergySource = Literal["counter", "power_integral", "mixed", "none"]

#: Upper bound on plausible power for any one card, used to reject impossible increments.
_MAX_PLAUSIBLE_W = 5000.0


@dataclass(slots=True)
class EnergyAccumulator:
    """Sum of energy increments for one card, in joules."""

    total_j: float = 0.0
    counter_j: float = 0.0
    """Part of ``total_j`` that came from counter increments."""
    integrated_j: float = 0.0
    """Part of ``total_j`` that came from integrating power."""
    counter_intervals: int = 0
    integrated_intervals: int = 0
    resets: int = 0
    wraps: int = 0
    _last_t: float | None = None
    _last_counter: float | None = None
    _last_power: float | None = None

    def add(
        self,
        t: float,
        counter_j: float | None,
        power_w: float | None,
        wraps_at_j: float | None = None,
        max_power_w: float | None = None,
    ) -> float:
        """Take one sample at time ``t`` (s); return the increment added (J)."""
        inc = 0.0
        if self._last_t is not None:
            dt = max(0.0, t - self._last_t)
            limit_w = max_power_w * 1.5 if max_power_w else _MAX_PLAUSIBLE_W
            from_counter = self._counter_increment(counter_j, dt, limit_w, wraps_at_j)
            if from_counter is not None:
                inc = from_counter
                self.counter_j += inc
                self.counter_intervals += 1
            else:
                inc = self._integrate(dt, power_w)
                self.integrated_j += inc
                if power_w is not None or self._last_power is not None:
                    self.integrated_intervals += 1
            self.total_j += inc
        self._last_t = t
        if counter_j is not None:
            self._last_counter = counter_j
        if power_w is not None:
            self._last_power = power_w
        return inc

    def _counter_increment(
        self, counter_j: float | None, dt: float, limit_w: float, wraps_at_j: float | None
    ) -> float | None:
        prev = self._last_counter
        if counter_j is None or prev is None:
            return None
        # Counters update in steps (tens of ms), so allow a quarter second of slack.
        max_inc = limit_w * (dt + 0.25)
        if counter_j >= prev:
            inc = counter_j - prev
            # A jump no card could draw in dt is a glitch (or a reset we missed): bridge it.
            return inc if inc <= max_inc else None
        if wraps_at_j is not None:
            inc = wraps_at_j - prev + counter_j
            if 0 <= inc <= max_inc:
                self.wraps += 1
                return inc
        # The counter went backwards: the driver was reloaded (or the card reset).
        self.resets += 1
        return None

    def _integrate(self, dt: float, power_w: float | None) -> float:
        a, b = self._last_power, power_w
        if a is None and b is None:
            return 0.0
        if a is None:
            a = b
        if b is None:
            b = a
        assert a is not None and b is not None
        return (a + b) / 2.0 * dt

    @property
    def source(self) -> EnergySource:
        if self.counter_intervals and self.integrated_intervals:
            return "mixed"
        if self.counter_intervals:
            return "counter"
        if self.integrated_intervals:
            return "power_integral"
        return "none"
