"""Descriptive statistics and the significance tests of ``stress compare``."""

from __future__ import annotations

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
