"""Per-card running figures for the summary, bounded in memory for hour-long soaks.

Nothing here grows with the run: sums, maxima and times per throttle reason. Times are
weighted by the real gap between two samples of the card (capped, so that a stalled
sampler does not credit an hour to one reading).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stress.collectors.gpu.energy import EnergyAccumulator
from stress.collectors.gpu.model import CardSample
from stress.collectors.gpu.throttle import decode

#: Power within this fraction of the limit counts as "at the power limit".
AT_LIMIT_FRACTION = 0.95
#: A card counts as under load at or above this utilisation (%).
LOADED_UTIL = 50.0
#: Under load, a card whose power never exceeds this fraction of its limit hints that
#: the host (CPU, scheduling, eager mode) is the bottleneck (field notes: 131-138 W of 180).
HOST_BOUND_FRACTION = 0.85
#: Seconds under load before the host-bound hint may be given.
HOST_BOUND_MIN_S = 10.0


def _max(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None or b > a else a


@dataclass(slots=True)
class CardStats:
    key: str
    max_gap_s: float = 3.0
    samples: int = 0
    seconds: float = 0.0
    power_ws: float = 0.0
    power_s: float = 0.0
    power_max_w: float | None = None
    power_limit_w: float | None = None
    at_limit_s: float = 0.0
    temp_max_c: float | None = None
    temp_mem_max_c: float | None = None
    util_sum: float = 0.0
    util_s: float = 0.0
    loaded_s: float = 0.0
    loaded_power_max_w: float | None = None
    throttle_s: dict[str, float] = field(default_factory=dict)
    energy: EnergyAccumulator = field(default_factory=EnergyAccumulator)
    last_t: float | None = None
    idle_flagged_s: float = 0.0
    flagged_ever: bool = False
    events: dict[str, int] = field(default_factory=dict)
    """Run-event counts by kind (xid, ecc, aer...)."""
    errors_first: dict[str, int] = field(default_factory=dict)
    errors_last: dict[str, int] = field(default_factory=dict)

    def add(self, s: CardSample) -> float:
        """Fold one sample in; returns the time weight (s) it was given."""
        dt = 0.0 if self.last_t is None else min(max(0.0, s.t - self.last_t), self.max_gap_s)
        self.last_t = s.t
        self.samples += 1
        self.seconds += dt
        if s.power_limit_w:
            self.power_limit_w = s.power_limit_w
        self.energy.add(
            s.t, s.energy_counter_j, s.power_w, s.energy_counter_wraps_at_j, self.power_limit_w
        )
        if s.power_w is not None:
            self.power_max_w = _max(self.power_max_w, s.power_w)
            self.power_ws += s.power_w * dt
            self.power_s += dt
            if self.power_limit_w and s.power_w >= AT_LIMIT_FRACTION * self.power_limit_w:
                self.at_limit_s += dt
        self.temp_max_c = _max(self.temp_max_c, s.temp_c)
        self.temp_mem_max_c = _max(self.temp_mem_max_c, s.temp_mem_c)
        if s.util_gpu is not None:
            self.util_sum += s.util_gpu * dt
            self.util_s += dt
            if s.util_gpu >= LOADED_UTIL:
                self.loaded_s += dt
                self.loaded_power_max_w = _max(self.loaded_power_max_w, s.power_w)
        for name in decode(s.throttle_mask):
            self.throttle_s[name] = self.throttle_s.get(name, 0.0) + dt
        return dt

    def count_event(self, kind: str, n: int = 1) -> None:
        self.events[kind] = self.events.get(kind, 0) + n

    @property
    def power_mean_w(self) -> float | None:
        return self.power_ws / self.power_s if self.power_s > 0 else None

    @property
    def host_bound(self) -> bool:
        if self.loaded_s < HOST_BOUND_MIN_S or not self.power_limit_w:
            return False
        if self.loaded_power_max_w is None:
            return False
        return self.loaded_power_max_w < HOST_BOUND_FRACTION * self.power_limit_w

    def as_dict(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "seconds": round(self.seconds, 3),
            "power_mean_w": _r(self.power_mean_w),
            "power_max_w": _r(self.power_max_w),
            "power_limit_w": _r(self.power_limit_w),
            "time_at_power_limit_s": round(self.at_limit_s, 3),
            "temp_max_c": self.temp_max_c,
            "temp_mem_max_c": self.temp_mem_max_c,
            "util_mean": _r(self.util_sum / self.util_s if self.util_s else None),
            "loaded_s": round(self.loaded_s, 3),
            "loaded_power_max_w": _r(self.loaded_power_max_w),
            "throttle_s": {k: round(v, 3) for k, v in sorted(self.throttle_s.items())},
            "energy_j": round(self.energy.total_j, 3),
            "energy_source": self.energy.source,
            "energy_counter_resets": self.energy.resets,
            "idle_while_others_work_s": round(self.idle_flagged_s, 3),
            "flagged_idle": self.flagged_ever,
            "host_bound": self.host_bound,
            "events": dict(sorted(self.events.items())),
            "error_counters_start": dict(self.errors_first),
            "error_counters_end": dict(self.errors_last),
        }


def _r(v: float | None, nd: int = 2) -> float | None:
    return None if v is None else round(v, nd)
