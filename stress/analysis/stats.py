"""Descriptive statistics and the significance tests behind ``stress compare``.

Field note 6: mean with spread, never max, and say when a difference is inside the noise.
Per-request figures are compared with a bootstrap interval of the difference (fixed seed,
so a report is reproducible); run-level figures of repeated runs with Welch's t-test.
Requests of one run are not independent (they share a server, a moment, a conversation),
so a per-request interval is optimistic; docs/reports.md says so and pooling repeated
runs is preferred.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261130
CONFIDENCE = 0.95

# Two-sided 95 % critical values of Student's t by degrees of freedom (no scipy needed).
_T975 = (
    (1, 12.706),
    (2, 4.303),
    (3, 3.182),
    (4, 2.776),
    (5, 2.571),
    (6, 2.447),
    (7, 2.365),
    (8, 2.306),
    (9, 2.262),
    (10, 2.228),
    (12, 2.179),
    (15, 2.131),
    (20, 2.086),
    (30, 2.042),
    (60, 2.000),
    (120, 1.980),
)


@dataclass(frozen=True, slots=True)
class Describe:
    """Mean, sample standard deviation, percentiles and n of one figure."""

    n: int
    mean: float | None = None
    sd: float | None = None
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None


def describe(values: Sequence[float] | FloatArray) -> Describe:
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size == 0:
        return Describe(0)
    p50, p95, p99 = np.percentile(a, [50, 95, 99])
    return Describe(
        n=int(a.size),
        mean=float(a.mean()),
        sd=float(a.std(ddof=1)) if a.size > 1 else 0.0,
        p50=float(p50),
        p95=float(p95),
        p99=float(p99),
    )


@dataclass(frozen=True, slots=True)
class Difference:
    """B minus A, an interval for it, and whether the interval excludes zero."""

    diff: float | None
    low: float | None
    high: float | None
    significant: bool | None
    """None: too few samples to judge."""
    method: str


def _resampled_means(a: FloatArray, rng: np.random.Generator, n_boot: int) -> FloatArray:
    """Bootstrap means of ``a``, in chunks so memory stays bounded for large runs."""
    out = np.empty(n_boot)
    chunk = max(1, min(n_boot, 4_000_000 // max(1, a.size)))
    for start in range(0, n_boot, chunk):
        k = min(chunk, n_boot - start)
        idx = rng.integers(0, a.size, size=(k, a.size))
        out[start : start + k] = a[idx].mean(axis=1)
    return out


def _resampled_ratios(
    num: FloatArray, den: FloatArray, rng: np.random.Generator, n_boot: int
) -> FloatArray:
    out = np.empty(n_boot)
    chunk = max(1, min(n_boot, 4_000_000 // max(1, num.size)))
    for start in range(0, n_boot, chunk):
        k = min(chunk, n_boot - start)
        idx = rng.integers(0, num.size, size=(k, num.size))
        d = den[idx].sum(axis=1)
        out[start : start + k] = np.where(d > 0, num[idx].sum(axis=1) / np.maximum(d, 1e-300), 0)
    return out


def bootstrap_mean_diff(
    a: Sequence[float] | FloatArray, b: Sequence[float] | FloatArray, min_n: int = 5
) -> Difference:
    """Percentile bootstrap interval of mean(b) - mean(a) over requests."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    method = f"bootstrap {int(CONFIDENCE * 100)}% CI of the difference of means, per request"
    if x.size < min_n or y.size < min_n:
        diff = float(y.mean() - x.mean()) if x.size and y.size else None
        return Difference(diff, None, None, None, method)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    d = _resampled_means(y, rng, BOOTSTRAP_RESAMPLES) - _resampled_means(
        x, rng, BOOTSTRAP_RESAMPLES
    )
    return _interval(float(y.mean() - x.mean()), d, method)


def bootstrap_ratio_diff(
    num_a: Sequence[float] | FloatArray,
    den_a: Sequence[float] | FloatArray,
    num_b: Sequence[float] | FloatArray,
    den_b: Sequence[float] | FloatArray,
    min_n: int = 5,
) -> Difference:
    """Bootstrap interval of the difference of two ratios of sums (e.g. cached / prompt)."""
    na, da = np.asarray(num_a, dtype=float), np.asarray(den_a, dtype=float)
    nb, db = np.asarray(num_b, dtype=float), np.asarray(den_b, dtype=float)
    method = f"bootstrap {int(CONFIDENCE * 100)}% CI of the difference, per request"
    if na.size < min_n or nb.size < min_n or da.sum() <= 0 or db.sum() <= 0:
        diff = None
        if da.sum() > 0 and db.sum() > 0:
            diff = float(nb.sum() / db.sum() - na.sum() / da.sum())
        return Difference(diff, None, None, None, method)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    d = _resampled_ratios(nb, db, rng, BOOTSTRAP_RESAMPLES) - _resampled_ratios(
        na, da, rng, BOOTSTRAP_RESAMPLES
    )
    return _interval(float(nb.sum() / db.sum() - na.sum() / da.sum()), d, method)


def _interval(diff: float, boots: FloatArray, method: str) -> Difference:
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(boots, [alpha, 1.0 - alpha])
    return Difference(diff, float(low), float(high), not (low <= 0.0 <= high), method)


PERCENTILE_BOOT_ELEMENTS = 8_000_000
"""Work bound of one percentile interval: resamples x n stays under this (an 8k-request
run gets 1,000 resamples, a 40k one 200), so a report's cost grows with n, not n x B."""


def percentile_interval(
    values: Sequence[float] | FloatArray, q: float, min_n: int = 2
) -> tuple[float, float] | None:
    """Percentile bootstrap 95 % interval of the q-th percentile of ``values`` (fixed
    seed: every output that shows it shows the same interval). None below ``min_n``.

    Resamples are requests: requests of one run share a server and a conversation, so
    the interval is optimistic about independence (docs/reports.md)."""
    a = np.asarray(values, dtype=float)
    a = a[np.isfinite(a)]
    if a.size < min_n:
        return None
    n_boot = int(max(200, min(1000, PERCENTILE_BOOT_ELEMENTS // a.size)))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    out = np.empty(n_boot)
    chunk = max(1, min(n_boot, 4_000_000 // a.size))
    for start in range(0, n_boot, chunk):
        k = min(chunk, n_boot - start)
        idx = rng.integers(0, a.size, size=(k, a.size))
        out[start : start + k] = np.percentile(a[idx], q, axis=1)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(out, [alpha, 1.0 - alpha])
    return float(low), float(high)


def t_critical(df: float) -> float:
    """Two-sided 95 % critical value of Student's t (table, interpolated in 1/df)."""
    if df >= _T975[-1][0]:
        return 1.96 + (_T975[-1][1] - 1.96) * _T975[-1][0] / df
    prev = _T975[0]
    for k, v in _T975:
        if df <= k:
            if k == prev[0]:
                return v
            w = (1.0 / df - 1.0 / prev[0]) / (1.0 / k - 1.0 / prev[0])
            return prev[1] + w * (v - prev[1])
        prev = (k, v)
    return 1.96


def welch(a: Sequence[float], b: Sequence[float]) -> Difference:
    """Welch's t-test (95 % interval) of mean(b) - mean(a), for run-level figures."""
    x = np.asarray(a, dtype=float)
    y = np.asarray(b, dtype=float)
    method = "Welch's t-test over runs (95% CI)"
    if x.size < 2 or y.size < 2:
        diff = float(y.mean() - x.mean()) if x.size and y.size else None
        return Difference(diff, None, None, None, method + ": too few runs to judge")
    va, vb = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    diff = float(y.mean() - x.mean())
    se = math.sqrt(va + vb)
    if se == 0.0:
        return Difference(diff, diff, diff, diff != 0.0, method)
    df = (va + vb) ** 2 / (va**2 / (x.size - 1) + vb**2 / (y.size - 1))
    half = t_critical(df) * se
    low, high = diff - half, diff + half
    return Difference(diff, low, high, not (low <= 0.0 <= high), method)
