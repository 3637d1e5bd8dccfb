"""The two-level bootstrap against a naive index-resampling implementation, and its invariants."""

from __future__ import annotations

import numpy as np
import pytest

from chexretrieve.evaluation.config import IntervalConfig
from chexretrieve.evaluation.intervals import bootstrap_mean, bootstrap_mean_of_findings


def _naive(values, n_boot, seed, shared):
    rng = np.random.default_rng(seed)
    c, q = values.shape
    reps = []
    for _ in range(n_boot):
        cells = rng.integers(0, c, c)
        if shared:
            queries = rng.integers(0, q, q)
            reps.append(values[np.ix_(cells, queries)].mean())
        else:
            reps.append(np.mean([values[i, rng.integers(0, q, q)].mean() for i in cells]))
    return np.quantile(reps, [0.025, 0.975])


@pytest.mark.parametrize("mode", ["shared", "per_cell"])
def test_matches_naive_resampling(mode):
    rng = np.random.default_rng(1)
    # cell effects + query effects + noise, like AP differences
    values = (
        rng.normal(0, 0.02, (6, 1)) + rng.normal(0.01, 0.05, (1, 40)) + rng.normal(0, 0.01, (6, 40))
    )
    config = IntervalConfig(n_bootstrap=3000, seed=3, query_resampling=mode)
    ours = bootstrap_mean(values, config)
    low, high = _naive(values, 3000, 11, shared=mode == "shared")
    width = high - low
    assert ours.mean == pytest.approx(values.mean())
    assert abs(ours.low - low) < 0.1 * width and abs(ours.high - high) < 0.1 * width


def test_shared_resampling_is_wider_when_queries_dominate():
    rng = np.random.default_rng(2)
    values = np.repeat(rng.normal(0, 0.1, (1, 30)), 8, axis=0) + rng.normal(0, 0.001, (8, 30))
    shared = bootstrap_mean(values, IntervalConfig(seed=0))
    per_cell = bootstrap_mean(values, IntervalConfig(seed=0, query_resampling="per_cell"))
    assert (shared.high - shared.low) > 2 * (per_cell.high - per_cell.low)


def test_seeded_and_degenerate_cases():
    values = np.random.default_rng(0).normal(size=(3, 10))
    a = bootstrap_mean(values, IntervalConfig(seed=4))
    b = bootstrap_mean(values, IntervalConfig(seed=4))
    assert a == b and a.low <= a.mean <= a.high
    constant = bootstrap_mean(np.full((2, 5), 0.25), IntervalConfig())
    assert constant.low == pytest.approx(0.25) and constant.high == pytest.approx(0.25)


def test_average_of_findings():
    rng = np.random.default_rng(3)
    m1, m2 = rng.normal(0.1, 0.05, (4, 10)), rng.normal(-0.1, 0.05, (4, 25))
    avg = bootstrap_mean_of_findings([m1, m2], IntervalConfig(seed=1))
    assert avg.mean == pytest.approx((m1.mean() + m2.mean()) / 2)
    assert avg.low < avg.mean < avg.high
    with pytest.raises(ValueError, match="same cells"):
        bootstrap_mean_of_findings([m1, m2[:3]], IntervalConfig())


def test_bad_input_messages():
    with pytest.raises(ValueError, match="non-empty"):
        bootstrap_mean(np.zeros((0, 3)), IntervalConfig())
    with pytest.raises(ValueError, match="missing entries"):
        bootstrap_mean(np.array([[np.nan, 1.0]]), IntervalConfig())
    with pytest.raises(ValueError, match="query_resampling"):
        IntervalConfig(query_resampling="nested")
