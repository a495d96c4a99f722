"""Descriptive statistics and the significance tests of ``stress compare``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stress.analysis.stats import (
    bootstrap_mean_diff,
    bootstrap_ratio_diff,
    describe,
    t_critical,
    welch,
)


def test_describe_known_values() -> None:
    d = describe([1.0, 2.0, 3.0, 4.0, 5.0])
    assert d.n == 5
    assert d.mean == pytest.approx(3.0)
    assert d.sd == pytest.approx(np.std([1, 2, 3, 4, 5], ddof=1))
    assert d.p50 == pytest.approx(3.0)
    assert describe([]).n == 0 and describe([]).mean is None


def test_bootstrap_separates_shifted_samples_and_not_equal_ones() -> None:
    rng = np.random.default_rng(1)
    a = rng.normal(10, 1, 200)
    shifted = bootstrap_mean_diff(a, rng.normal(11, 1, 200))
    same = bootstrap_mean_diff(a, rng.normal(10, 1, 200))
    assert shifted.significant is True
    assert shifted.low is not None and shifted.low > 0
    assert same.significant is False
    assert bootstrap_mean_diff([1.0, 2.0], [3.0, 4.0]).significant is None  # too few


def test_bootstrap_is_reproducible() -> None:
    a, b = list(range(30)), list(range(5, 35))
    assert bootstrap_mean_diff(a, b) == bootstrap_mean_diff(a, b)


def test_ratio_bootstrap() -> None:
    prompt = [1000.0] * 50
    d = bootstrap_ratio_diff([100.0] * 50, prompt, [600.0] * 50, prompt)
    assert d.diff == pytest.approx(0.5)
    assert d.significant is True


def test_welch_and_t_table() -> None:
    assert t_critical(1) == pytest.approx(12.706)
    assert t_critical(10) == pytest.approx(2.228)
    assert 2.0 < t_critical(40) < 2.042
    assert t_critical(10_000) == pytest.approx(1.96, abs=0.01)
    assert welch([45.5], [54.5]).significant is None  # one run each: cannot judge
    noisy = welch([45.5, 54.5, 50.0], [47.0, 52.0, 53.0])
    assert noisy.significant is False
    assert welch([10.0, 10.1, 9.9], [20.0, 20.2, 19.8]).significant is True


def test_the_interval_resamples_users_when_their_requests_are_correlated(
    tmp_path: Path,
) -> None:
    """Eight users whose TTFTs sit around their own level (a slow slot, a long
    conversation): resampling requests treats 240 requests as independent and gives a
    narrow interval; resampling users (all of a user's requests together) is what the
    data can support, and the verdict's SLO check shows that one (issue 35)."""
    import random

    from stress.analysis.judge import slo_checks
    from stress.analysis.rundata import load_run
    from stress.analysis.stats import percentile_interval
    from tests.report.synth import manifest, request, write_run

    rng = random.Random(7)
    reqs = [
        request(u, i, float(i * 10 + u), ttft=1.0 + u + rng.uniform(-0.1, 0.1))
        for u in range(8)
        for i in range(1, 31)
    ]
    values = [r["ttft_s"] for r in reqs]
    users = [r["user"] for r in reqs]
    per_request = percentile_interval(values, 95)
    per_user = percentile_interval(values, 95, clusters=users)
    assert per_request is not None and per_user is not None
    assert per_user[1] - per_user[0] > 3 * (per_request[1] - per_request[0])
    man = manifest(users=8, slo={"ttft_p95": 10.0})
    [check] = slo_checks(load_run(write_run(tmp_path, man, reqs)))
    assert check.interval == per_user
    # too few users to resample: the request bootstrap, said as such in the docs
    assert percentile_interval(values[:60], 95, clusters=users[:60]) == percentile_interval(
        values[:60], 95
    )


def test_a_difference_of_means_resamples_users_when_each_side_has_five() -> None:
    """Two runs of eight users whose TTFTs sit around each user's own level: the request
    bootstrap calls a 0.3 s shift significant from 240 correlated requests a side; over
    users (what the data can support) it is within the noise. With four users a side the
    request bootstrap is used and its method says so."""
    import random

    rng = random.Random(3)
    a = [(u, 1.0 + 0.5 * rng.random() * u + rng.uniform(-0.02, 0.02)) for u in range(8)]
    b = [(u, 1.3 + 0.5 * rng.random() * u + rng.uniform(-0.02, 0.02)) for u in range(8)]
    xa = [v for _, v in a for _ in range(30)]
    xb = [v for _, v in b for _ in range(30)]
    ua = [u for u, _ in a for _ in range(30)]
    ub = [u for u, _ in b for _ in range(30)]
    per_request = bootstrap_mean_diff(xa, xb)
    per_user = bootstrap_mean_diff(xa, xb, clusters_a=ua, clusters_b=ub)
    assert per_request.method.endswith("per request")
    assert per_user.method.endswith("per user")
    assert per_user.low is not None and per_request.low is not None
    assert per_user.high is not None and per_request.high is not None
    assert per_user.high - per_user.low > 3 * (per_request.high - per_request.low)
    assert per_user.diff == per_request.diff
    assert per_request.significant is True and per_user.significant is False
    four = bootstrap_mean_diff(xa[:120], xb[:120], clusters_a=ua[:120], clusters_b=ub[:120])
    assert four.method.endswith("per request")
    assert four == bootstrap_mean_diff(xa[:120], xb[:120])
    ratio = bootstrap_ratio_diff(xa, [1.0] * 240, xb, [1.0] * 240, clusters_a=ua, clusters_b=ub)
    assert ratio.method.endswith("per user") and ratio.low == pytest.approx(per_user.low)


def test_the_t_table_holds_every_confidence_a_search_may_ask_for() -> None:
    from stress.analysis.stats import T_TABLE
    from stress.config.scenario import CONFIDENCES

    assert set(T_TABLE) == set(CONFIDENCES)
    for c in CONFIDENCES:
        values = [t_critical(df, c) for df in (1, 2, 5, 10, 11, 40, 119, 120, 10_000)]
        assert values == sorted(values, reverse=True)  # narrower with more passes
        assert values[-1] == pytest.approx(T_TABLE[c][0], abs=0.01)
    assert t_critical(3, 0.9) == pytest.approx(2.353) and t_critical(5, 0.99) == 4.032


def _runs_of_users(
    levels: list[float], seed: int, users: int = 8, per_user: int = 20
) -> tuple[list[float], list[tuple[int, int]]]:
    """Requests of one run per level: each user's TTFTs sit tight around the run's level
    (users of one run share the server), and the levels differ between runs."""
    rng = np.random.default_rng(seed)
    values: list[float] = []
    keys: list[tuple[int, int]] = []
    for run, level in enumerate(levels):
        for user in range(users):
            own = level + rng.normal(0, 0.02)
            values += [float(v) for v in own + rng.normal(0, 0.02, per_user)]
            keys += [(run, user)] * per_user
    return values, keys


def test_repeated_runs_are_resampled_as_runs_then_users() -> None:
    """Two groups of three runs whose run levels spread by 1.2 s while users within a run
    agree to 0.02 s: 24 (run, user) clusters a side resampled as independent users call
    the 0.5 s shift significant, yet three runs a side cannot tell it from the run-to-run
    noise; drawing runs, then users within them, says so (issue 35)."""
    xa, ka = _runs_of_users([1.4, 2.0, 2.6], seed=5)
    xb, kb = _runs_of_users([1.9, 2.5, 3.1], seed=6)
    nested = bootstrap_mean_diff(xa, xb, clusters_a=ka, clusters_b=kb)
    # the same clusters, with keys that name no run: today's user-level resampling
    flat = bootstrap_mean_diff(
        xa, xb, clusters_a=[f"{r}/{u}" for r, u in ka], clusters_b=[f"{r}/{u}" for r, u in kb]
    )
    assert nested.method.endswith("per run, then user") and nested.unit == "per run, then user"
    assert flat.method.endswith("per user") and flat.unit == "per user"
    assert nested.diff == flat.diff == pytest.approx(0.5, abs=0.05)
    assert nested.low is not None and nested.high is not None
    assert flat.low is not None and flat.high is not None
    assert nested.high - nested.low > 2.5 * (flat.high - flat.low)
    assert flat.significant is True and flat.low > 0
    assert nested.significant is False and nested.low < 0 < nested.high
    assert bootstrap_mean_diff(xa, xb, clusters_a=ka, clusters_b=kb) == nested  # fixed seed
    ones_a, ones_b = [1.0] * len(xa), [1.0] * len(xb)
    ratio = bootstrap_ratio_diff(xa, ones_a, xb, ones_b, clusters_a=ka, clusters_b=kb)
    assert ratio.method.endswith("per run, then user")
    assert ratio.low == pytest.approx(nested.low) and ratio.high == pytest.approx(nested.high)


def test_a_side_of_one_run_resamples_its_users_as_before() -> None:
    """(run, user) keys of a single run draw users exactly as before runs were drawn (the
    interval below is the one the user-level bootstrap gave); a side of three runs against
    a side of one says which side was drawn how."""
    import random

    rng = random.Random(3)
    a = [(u, 1.0 + 0.5 * rng.random() * u + rng.uniform(-0.02, 0.02)) for u in range(8)]
    b = [(u, 1.3 + 0.5 * rng.random() * u + rng.uniform(-0.02, 0.02)) for u in range(8)]
    xa = [v for _, v in a for _ in range(30)]
    xb = [v for _, v in b for _ in range(30)]
    ka = [(0, u) for u, _ in a for _ in range(30)]
    kb = [(1, u) for u, _ in b for _ in range(30)]
    one_run = bootstrap_mean_diff(xa, xb, clusters_a=ka, clusters_b=kb)
    assert one_run.method.endswith("per user")
    assert one_run == bootstrap_mean_diff(
        xa, xb, clusters_a=[u for _, u in ka], clusters_b=[u for _, u in kb]
    )
    assert one_run.low == pytest.approx(-0.5259846716015455, abs=1e-12)
    assert one_run.high == pytest.approx(1.377703710817374, abs=1e-12)
    x3, k3 = _runs_of_users([1.4, 2.0, 2.6], seed=5)
    mixed = bootstrap_mean_diff(x3, xb, clusters_a=k3, clusters_b=kb)
    assert mixed.method.endswith("per run, then user (per user on the side of one run)")


@pytest.mark.parametrize("chunk", [None, 7])
def test_the_nested_draw_takes_each_drawn_run_with_its_own_users(
    chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run 0 holds one user with two requests at 0, run 1 four users with one request at
    1: a resample draws two runs, so its mean is 0 (run 0 twice), 1 (run 1 twice) or 2/3
    (one each: 2 + 4 requests), with chances 1/4, 1/4, 1/2. A user's requests go
    together, and a run of fewer users than the widest draws only its own, also when the
    resamples come in chunks (bounded memory)."""
    from stress.analysis import stats

    if chunk is not None:
        monkeypatch.setattr(stats, "_chunk", lambda width: chunk)
    sums = stats.cluster_sums(
        np.array([0.0, 1.0, 1.0, 1.0, 0.0, 1.0]),
        np.ones(6),
        [(0, "a"), (1, "b"), (1, "c"), (1, "d"), (0, "a"), (1, "e")],
    )
    assert sums is not None and sums.run_sizes is not None
    assert sums.run_sizes.tolist() == [1, 4]
    means = stats._side_ratios(sums, np.random.default_rng(stats.BOOTSTRAP_SEED))
    assert means.size == stats.BOOTSTRAP_RESAMPLES
    assert set(np.round(means, 9).tolist()) == {0.0, round(2 / 3, 9), 1.0}
    assert np.mean(means == 0.0) == pytest.approx(0.25, abs=0.04)
    assert np.mean(np.isclose(means, 2 / 3)) == pytest.approx(0.5, abs=0.04)


@pytest.mark.parametrize(
    ("clusters", "per", "q"), [(5, 1, 50), (8, 5, 95), (64, 40, 99), (300, 700, 95), (2000, 10, 0)]
)
def test_the_cluster_percentile_interval_is_the_drawn_clusters_percentile(
    clusters: int, per: int, q: float
) -> None:
    """The weighted-rank search gives exactly what concatenating each resample's drawn
    clusters and taking ``np.percentile`` gives (the definition), draw for draw."""
    from stress.analysis.stats import BOOTSTRAP_SEED, CONFIDENCE, _cluster_interval

    rng = np.random.default_rng(clusters)
    groups = [
        rng.gamma(2.0, 1.0 + i % 3, size=int(rng.integers(1, 2 * per + 1))) for i in range(clusters)
    ]
    total = sum(g.size for g in groups)
    n_boot = int(max(200, min(1000, 8_000_000 // total)))
    draws = np.random.default_rng(BOOTSTRAP_SEED)
    plain = [
        np.percentile(
            np.concatenate([groups[i] for i in draws.integers(0, clusters, size=clusters)]), q
        )
        for _ in range(n_boot)
    ]
    alpha = (1.0 - CONFIDENCE) / 2.0
    want = tuple(float(v) for v in np.quantile(plain, [alpha, 1.0 - alpha]))
    assert _cluster_interval(groups, q) == want
