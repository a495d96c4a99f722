"""A log-binned histogram of seconds: percentiles of millions of gaps in bounded memory.

Inter-token gaps are too many to keep (a one-hour run at 64 users holds tens of millions),
so their distributions (overall, per user, per conversation-length bucket) are counted
into fixed logarithmic bins: ``BINS_PER_DECADE`` bins per factor of ten from ``LOW`` to
``HIGH`` seconds, 8 KiB per histogram whatever the run's length. A percentile is the
geometric centre of the bin holding its rank (nearest rank), so it is within half a bin,
under 1 % of the value, clamped to the exact minimum and maximum (a constant gap reads
exactly). Count, mean, standard deviation, minimum and maximum are exact. Values below
``LOW`` (chunks that arrived in one read: a gap of 0) fall in bin 0 and read as 0; values
past ``HIGH`` fall in the last bin and read as the maximum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

BINS_PER_DECADE = 128
LOW = 1e-5
"""Seconds; below this a gap is counted as 0 (several chunks in one read)."""
DECADES = 8
HIGH = LOW * 10**DECADES
"""1,000 s: longer gaps count in the last bin."""
NBINS = 1 + BINS_PER_DECADE * DECADES
PERCENTILES = (50, 90, 95, 99)


def _counts() -> npt.NDArray[np.int64]:
    return np.zeros(NBINS, dtype=np.int64)


@dataclass(slots=True)
class LogHistogram:
    counts: npt.NDArray[np.int64] = field(default_factory=_counts)
    n: int = 0
    total: float = 0.0
    total_sq: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    def add(self, values: npt.NDArray[Any]) -> None:
        """Count ``values`` (seconds, finite and >= 0; others are skipped)."""
        v = np.asarray(values, dtype=np.float64)
        v = v[np.isfinite(v) & (v >= 0.0)]
        if not v.size:
            return
        idx = np.zeros(v.size, dtype=np.int64)
        above = v >= LOW
        if above.any():
            b = np.floor(np.log10(v[above] / LOW) * BINS_PER_DECADE).astype(np.int64) + 1
            idx[above] = np.clip(b, 1, NBINS - 1)
        self.counts += np.bincount(idx, minlength=NBINS)
        self.n += int(v.size)
        self.total += float(v.sum())
        self.total_sq += float(np.dot(v, v))
        self.low = min(self.low, float(v.min()))
        self.high = max(self.high, float(v.max()))

    def merge(self, other: LogHistogram) -> None:
        self.counts += other.counts
        self.n += other.n
        self.total += other.total
        self.total_sq += other.total_sq
        self.low = min(self.low, other.low)
        self.high = max(self.high, other.high)

    @property
    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    @property
    def sd(self) -> float | None:
        """Sample standard deviation (0 for one value, None for none)."""
        if self.n < 2:
            return 0.0 if self.n else None
        var = (self.total_sq - self.total * self.total / self.n) / (self.n - 1)
        return math.sqrt(max(0.0, var))

    def percentile(self, q: float) -> float | None:
        """The q-th percentile (nearest rank), the centre of its bin, None for no values."""
        if not self.n:
            return None
        rank = max(1, math.ceil(q / 100.0 * self.n))
        b = int(np.searchsorted(np.cumsum(self.counts), rank))
        if rank >= self.n or b == NBINS - 1:  # the largest value, or past the last bin
            return self.high
        value = 0.0 if b == 0 else LOW * 10.0 ** ((b - 0.5) / BINS_PER_DECADE)
        return min(max(value, self.low), self.high)

    def as_dict(self) -> dict[str, Any]:
        """n, mean, sd, p50, p90, p95, p99, min, max (None without values)."""
        out: dict[str, Any] = {"n": self.n, "mean": self.mean, "sd": self.sd}
        for q in PERCENTILES:
            out[f"p{q}"] = self.percentile(q)
        out["min"] = self.low if self.n else None
        out["max"] = self.high if self.n else None
        return out
