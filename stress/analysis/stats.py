"""Descriptive statistics and the significance tests behind ``stress compare``.

Field note 6: mean with spread, never max, and say when a difference is inside the noise.
Per-request figures are compared with a bootstrap interval of the difference (fixed seed,
so a report is reproducible); run-level figures of repeated runs with Welch's t-test.
Requests of one run are not independent (they share a server, a moment, a conversation),
so a per-request interval is optimistic: the bootstrap resamples users, and for a side of
repeated runs runs first and users within them, since users of one run share the server;
docs/reports.md says so and pooling repeated runs is preferred.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 20261130
CONFIDENCE = 0.95

MIN_CLUSTERS = 5
"""Fewest users for a cluster bootstrap: below it, resampling users says nothing about the
spread, and the interval falls back to resampling requests."""

_DF = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 15, 20, 30, 60, 120)
T_TABLE: dict[float, tuple[float, tuple[float, ...]]] = {
    0.8: (1.282, (3.078, 1.886, 1.638, 1.533, 1.476, 1.440, 1.415, 1.397, 1.383, 1.372,
                  1.356, 1.341, 1.325, 1.310, 1.296, 1.289)),
    0.9: (1.645, (6.314, 2.920, 2.353, 2.132, 2.015, 1.943, 1.895, 1.860, 1.833, 1.812,
                  1.782, 1.753, 1.725, 1.697, 1.671, 1.658)),
    0.95: (1.960, (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                   2.179, 2.131, 2.086, 2.042, 2.000, 1.980)),
    0.99: (2.576, (63.657, 9.925, 5.841, 4.604, 4.032, 3.707, 3.499, 3.355, 3.250, 3.169,
                   3.055, 2.947, 2.845, 2.750, 2.660, 2.617)),
}  # fmt: skip
"""Two-sided critical values of Student's t by confidence: (the normal's, the values at
``_DF`` degrees of freedom); no scipy needed. Welch's test uses 0.95, a capacity search
step the scenario's ``search.confidence`` (``stress.config.scenario.CONFIDENCES``)."""


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
    unit: str = ""
    """What a bootstrap resampled ("per run, then user", "per user", "per request"), for a
    judgement's label; empty for other methods."""


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


Clusters = Sequence[Hashable] | None
"""Each value's cluster (its run and user), parallel to the values; None: none known."""

PER_RUN_THEN_USER = "per run, then user"
PER_USER = "per user"
PER_REQUEST = "per request"


@dataclass(frozen=True, slots=True)
class ClusterSums:
    """One side's per-cluster sums of ``num`` and ``den``. When its clusters are (run,
    user) and it holds 2+ runs, they are ordered by run and ``run_sizes`` says how many
    each run has: users of one run share the server at every moment, so they are not
    independent units and a resample draws runs first (``_resampled_nested_ratios``)."""

    nums: FloatArray
    dens: FloatArray
    run_sizes: IntArray | None = None
    """Clusters per run, in order; None: one run (or keys naming none), resample users."""

    @property
    def unit(self) -> str:
        return PER_RUN_THEN_USER if self.run_sizes is not None else PER_USER


def bootstrap_mean_diff(
    a: Sequence[float] | FloatArray,
    b: Sequence[float] | FloatArray,
    min_n: int = 5,
    clusters_a: Clusters = None,
    clusters_b: Clusters = None,
) -> Difference:
    """Percentile bootstrap interval of mean(b) - mean(a): over clusters when both sides
    have ``MIN_CLUSTERS`` or more (runs then users on a side of 2+ runs, users on a side
    of one), else over requests (``cluster_sums``)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    ones_a, ones_b = np.ones(x.size), np.ones(y.size)
    cx, cy = cluster_sums(x, ones_a, clusters_a), cluster_sums(y, ones_b, clusters_b)
    keep_x, keep_y = np.isfinite(x), np.isfinite(y)
    x, y = x[keep_x], y[keep_y]
    unit = _unit(cx, cy)
    method = f"bootstrap {int(CONFIDENCE * 100)}% CI of the difference of means, {unit}"
    if x.size < min_n or y.size < min_n:
        diff = float(y.mean() - x.mean()) if x.size and y.size else None
        return Difference(diff, None, None, None, method, unit)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    if cx is not None and cy is not None:
        d = _side_ratios(cy, rng) - _side_ratios(cx, rng)
    else:
        d = _resampled_means(y, rng, BOOTSTRAP_RESAMPLES) - _resampled_means(
            x, rng, BOOTSTRAP_RESAMPLES
        )
    return _interval(float(y.mean() - x.mean()), d, method, unit)


def bootstrap_ratio_diff(
    num_a: Sequence[float] | FloatArray,
    den_a: Sequence[float] | FloatArray,
    num_b: Sequence[float] | FloatArray,
    den_b: Sequence[float] | FloatArray,
    min_n: int = 5,
    clusters_a: Clusters = None,
    clusters_b: Clusters = None,
) -> Difference:
    """Bootstrap interval of the difference of two ratios of sums (e.g. cached / prompt),
    over clusters when both sides have ``MIN_CLUSTERS`` or more (as
    ``bootstrap_mean_diff``), else over requests."""
    na, da = np.asarray(num_a, dtype=float), np.asarray(den_a, dtype=float)
    nb, db = np.asarray(num_b, dtype=float), np.asarray(den_b, dtype=float)
    ca, cb = cluster_sums(na, da, clusters_a), cluster_sums(nb, db, clusters_b)
    unit = _unit(ca, cb)
    method = f"bootstrap {int(CONFIDENCE * 100)}% CI of the difference, {unit}"
    if na.size < min_n or nb.size < min_n or da.sum() <= 0 or db.sum() <= 0:
        diff = None
        if da.sum() > 0 and db.sum() > 0:
            diff = float(nb.sum() / db.sum() - na.sum() / da.sum())
        return Difference(diff, None, None, None, method, unit)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    if ca is not None and cb is not None:
        d = _side_ratios(cb, rng) - _side_ratios(ca, rng)
    else:
        d = _resampled_ratios(nb, db, rng, BOOTSTRAP_RESAMPLES) - _resampled_ratios(
            na, da, rng, BOOTSTRAP_RESAMPLES
        )
    return _interval(float(nb.sum() / db.sum() - na.sum() / da.sum()), d, method, unit)


def _unit(a: ClusterSums | None, b: ClusterSums | None) -> str:
    """What the interval resamples, for its method text: clusters only when both sides
    have enough, and each side's own unit (a side of one run has no runs to draw)."""
    if a is None or b is None:
        return PER_REQUEST
    if a.unit == b.unit:
        return a.unit
    return f"{PER_RUN_THEN_USER} ({PER_USER} on the side of one run)"


def cluster_sums(num: FloatArray, den: FloatArray, clusters: Clusters) -> ClusterSums | None:
    """Per cluster, the sums of ``num`` and ``den`` over its finite values, grouped by run
    when the keys are (run, user) tuples of 2+ runs (``_by_run``); None without clusters,
    or with fewer than ``MIN_CLUSTERS`` (too few to resample: requests then)."""
    if clusters is None or len(clusters) != num.size:
        return None
    index: dict[Hashable, int] = {}
    keys = np.fromiter(
        (index.setdefault(c, len(index)) for c in clusters), dtype=np.int64, count=num.size
    )
    keep = np.isfinite(num) & np.isfinite(den)
    k = keys[keep]
    if len(set(k.tolist())) < MIN_CLUSTERS:
        return None
    n_clusters = len(index)
    nums = np.bincount(k, weights=num[keep], minlength=n_clusters)
    dens = np.bincount(k, weights=den[keep], minlength=n_clusters)
    present = np.bincount(k, minlength=n_clusters) > 0
    names = [c for c, i in index.items() if present[i]]
    return _by_run(
        np.asarray(nums[present], dtype=np.float64),
        np.asarray(dens[present], dtype=np.float64),
        names,
    )


def _by_run(nums: FloatArray, dens: FloatArray, names: list[Hashable]) -> ClusterSums:
    """The clusters ordered by run with each run's count, when every name is a (run, user)
    tuple and there are 2+ runs; else as given, so a one-run side resamples its users
    exactly as before runs were drawn."""
    pairs = [c for c in names if isinstance(c, tuple) and len(c) == 2]
    if len(pairs) != len(names):
        return ClusterSums(nums, dens)
    run_ids: dict[Hashable, int] = {}
    runs = np.array([run_ids.setdefault(c[0], len(run_ids)) for c in pairs], dtype=np.int64)
    if len(run_ids) < 2:
        return ClusterSums(nums, dens)
    order = np.argsort(runs, kind="stable")
    sizes = np.bincount(runs, minlength=len(run_ids)).astype(np.int64)
    return ClusterSums(nums[order], dens[order], sizes)


def _side_ratios(c: ClusterSums, rng: np.random.Generator) -> FloatArray:
    """One side's bootstrap ratios: runs then users on a side of 2+ runs, else users."""
    if c.run_sizes is None:
        return _resampled_cluster_ratios(c.nums, c.dens, rng)
    return _resampled_nested_ratios(c.nums, c.dens, c.run_sizes, rng)


def _chunk(width: int) -> int:
    """Resamples per chunk, so resamples x drawn clusters stays near 4 million."""
    return max(1, min(BOOTSTRAP_RESAMPLES, 4_000_000 // max(1, width)))


def _ratio(num: FloatArray, den: FloatArray) -> FloatArray:
    return np.asarray(num / np.where(den > 0, den, np.nan), dtype=np.float64)


def _resampled_cluster_ratios(
    nums: FloatArray, dens: FloatArray, rng: np.random.Generator
) -> FloatArray:
    """Bootstrap sum(num) / sum(den) over resampled clusters (a mean when den counts)."""
    out = np.empty(BOOTSTRAP_RESAMPLES)
    chunk = _chunk(nums.size)
    for start in range(0, BOOTSTRAP_RESAMPLES, chunk):
        k = min(chunk, BOOTSTRAP_RESAMPLES - start)
        idx = rng.integers(0, nums.size, size=(k, nums.size))
        out[start : start + k] = _ratio(nums[idx].sum(axis=1), dens[idx].sum(axis=1))
    return out


def _resampled_nested_ratios(
    nums: FloatArray, dens: FloatArray, run_sizes: IntArray, rng: np.random.Generator
) -> FloatArray:
    """Two-stage bootstrap of sum(num) / sum(den): each resample draws the side's runs
    with replacement, then within each drawn run as many of its users as it has, with
    replacement, so run-to-run noise (users of one run share the server) widens the
    interval as it should. Vectorised over a (resamples, runs, widest run) block; slots
    past a drawn run's own size are masked out."""
    n_runs, widest = run_sizes.size, int(run_sizes.max())
    starts = np.concatenate(([0], np.cumsum(run_sizes)[:-1])).astype(np.int64)
    slots = np.arange(widest)
    out = np.empty(BOOTSTRAP_RESAMPLES)
    chunk = _chunk(n_runs * widest)
    for start in range(0, BOOTSTRAP_RESAMPLES, chunk):
        k = min(chunk, BOOTSTRAP_RESAMPLES - start)
        runs = rng.integers(0, n_runs, size=(k, n_runs))
        sizes = run_sizes[runs][..., None]
        idx = starts[runs][..., None] + rng.integers(0, sizes, size=(k, n_runs, widest))
        drawn = slots < sizes
        num = np.where(drawn, nums[idx], 0.0).sum(axis=(1, 2))
        den = np.where(drawn, dens[idx], 0.0).sum(axis=(1, 2))
        out[start : start + k] = _ratio(num, den)
    return out


def _interval(diff: float, boots: FloatArray, method: str, unit: str) -> Difference:
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(boots, [alpha, 1.0 - alpha])
    return Difference(diff, float(low), float(high), not (low <= 0.0 <= high), method, unit)


PERCENTILE_BOOT_ELEMENTS = 8_000_000
"""Work bound of one percentile interval: resamples x n stays under this (an 8k-request
run gets 1,000 resamples, a 40k one 200), so a report's cost grows with n, not n x B."""


def percentile_interval(
    values: Sequence[float] | FloatArray,
    q: float,
    min_n: int = 2,
    clusters: Sequence[Hashable] | None = None,
) -> tuple[float, float] | None:
    """Percentile bootstrap 95 % interval of the q-th percentile of ``values`` (fixed
    seed: every output that shows it shows the same interval). None below ``min_n``.

    ``clusters`` (each value's user, parallel to ``values``): with ``MIN_CLUSTERS`` or more
    the resamples are users, each drawn with all its requests, since a user's requests are
    correlated (one conversation, one cache, one slot) and resampling requests treats them
    as independent, which narrows the interval. Without, resamples are requests, which is
    optimistic about independence (docs/reports.md)."""
    a = np.asarray(values, dtype=float)
    keep = np.isfinite(a)
    if clusters is not None and len(clusters) == a.size:
        groups: dict[Hashable, list[int]] = {}
        for i, c in enumerate(clusters):
            if keep[i]:
                groups.setdefault(c, []).append(i)
        if len(groups) >= MIN_CLUSTERS and int(keep.sum()) >= min_n:
            return _cluster_interval([a[g] for g in groups.values()], q)
    a = a[keep]
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


@dataclass(frozen=True, slots=True)
class _Ranked:
    """Every value of the clusters, sorted, with its cluster, and per block of ``block``
    sorted values how many of each cluster come before it (``before``: blocks + 1 rows):
    a resample's weighted rank is then one matrix product and a search in one block,
    never a pass over every value per resample."""

    values: FloatArray
    cluster: IntArray
    block: int
    before: FloatArray

    @classmethod
    def of(cls, groups: list[FloatArray]) -> _Ranked:
        values = np.concatenate(groups)
        cluster = np.repeat(np.arange(len(groups)), [g.size for g in groups])
        order = np.argsort(values, kind="stable")
        values, cluster = values[order], cluster[order]
        c, n = len(groups), values.size
        # blocks of 64 values, wider where that table would pass ~1M cells (memory bound)
        block = max(64, -(-n * c // RANK_TABLE_CELLS))
        nb = -(-n // block)
        m = np.bincount((np.arange(n) // block) * c + cluster, minlength=nb * c)
        before = np.vstack([np.zeros((1, c)), np.cumsum(m.reshape(nb, c), axis=0)])
        return cls(values, cluster, block, before.astype(np.float64))

    def at(self, weights: FloatArray, ranks: FloatArray) -> FloatArray:
        """Per resample (a row of ``weights``: draws per cluster), the value at its
        0-based rank in the sorted multiset those draws make."""
        counts = weights @ self.before.T  # values drawn before each block
        b = (counts <= ranks[:, None]).sum(axis=1) - 1
        n = self.values.size
        idx = b[:, None] * self.block + np.arange(self.block)
        inside = idx < n
        idx = np.minimum(idx, n - 1)
        w = np.where(inside, np.take_along_axis(weights, self.cluster[idx], axis=1), 0.0)
        cum = counts[np.arange(b.size), b][:, None] + np.cumsum(w, axis=1)
        pos = (cum <= ranks[:, None]).sum(axis=1)
        return np.asarray(self.values[np.minimum(b * self.block + pos, n - 1)], dtype=np.float64)


RANK_TABLE_CELLS = 1_000_000
"""Bound on ``_Ranked.before`` (blocks x clusters) and on one chunk of resamples' work."""


def _cluster_interval(groups: list[FloatArray], q: float) -> tuple[float, float]:
    """The percentile bootstrap over clusters: each resample draws as many clusters as
    there are, with replacement, and takes the q-th percentile (linear, as
    ``np.percentile``) of all their values: the multiset is weighted by the draws, so the
    interval equals concatenating the drawn clusters and taking their percentile."""
    total = sum(g.size for g in groups)
    n_boot = int(max(200, min(1000, PERCENTILE_BOOT_ELEMENTS // max(total, 1))))
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    ranked = _Ranked.of(groups)
    c = len(groups)
    sizes = np.array([g.size for g in groups], dtype=np.float64)
    out = np.empty(n_boot)
    chunk = max(1, min(n_boot, RANK_TABLE_CELLS // max(c, ranked.before.shape[0], ranked.block)))
    for start in range(0, n_boot, chunk):
        k = min(chunk, n_boot - start)
        picks = rng.integers(0, c, size=(k, c))  # the same draws, in order, as one by one
        flat = (picks + (np.arange(k) * c)[:, None]).ravel()
        weights = np.bincount(flat, minlength=k * c).reshape(k, c).astype(np.float64)
        h = (weights @ sizes - 1) * (q / 100.0)
        lo = np.floor(h)
        low_v = ranked.at(weights, lo)
        high_v = ranked.at(weights, np.minimum(lo + 1, weights @ sizes - 1))
        out[start : start + k] = low_v + (high_v - low_v) * (h - lo)
    alpha = (1.0 - CONFIDENCE) / 2.0
    low, high = np.quantile(out, [alpha, 1.0 - alpha])
    return float(low), float(high)


def t_critical(df: float, confidence: float = CONFIDENCE) -> float:
    """Two-sided critical value of Student's t at ``confidence`` (``T_TABLE``,
    interpolated in 1/df; past 120 degrees of freedom, towards the normal's)."""
    z, row = T_TABLE[confidence]
    if df >= _DF[-1]:
        return z + (row[-1] - z) * _DF[-1] / df
    df = max(df, 1.0)
    for k in range(len(_DF)):
        if df <= _DF[k]:
            if k == 0 or df == _DF[k]:
                return row[k]
            w = (1.0 / df - 1.0 / _DF[k - 1]) / (1.0 / _DF[k] - 1.0 / _DF[k - 1])
            return row[k - 1] + w * (row[k] - row[k - 1])
    return z


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
