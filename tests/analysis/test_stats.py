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
