"""The calibrated similarity: the chance of the same finding status at each rank (issue 24)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.isotonic import IsotonicRegression

from chexretrieve.search.calibration import best_first, calibrate, isotonic_decreasing, statuses


def test_isotonic_fit_matches_a_reference_implementation() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        values = rng.random(15)
        weights = rng.integers(1, 9, size=15).astype(float)
        reference = IsotonicRegression(increasing=False).fit_transform(
            np.arange(15), values, sample_weight=weights
        )
        np.testing.assert_allclose(isotonic_decreasing(values, weights), reference, atol=1e-12)


def _world(n=120, seed=1):
    rng = np.random.default_rng(seed)
    labels = rng.choice([1.0, 0.0, np.nan, -1.0], size=n, p=[0.3, 0.4, 0.25, 0.05])
    embeddings = rng.standard_normal((n, 8)).astype(np.float32)
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    return np.arange(1, n + 1), labels, embeddings


def test_a_ranking_by_status_is_sure_and_a_random_one_is_at_chance() -> None:
    ids, labels, embeddings = _world()
    status = statuses(labels)
    rng = np.random.default_rng(4)

    def by_status(image_id):
        row = image_id - 1
        same = np.nan_to_num(status == status[row]).astype(float)
        eligible = np.ones(len(ids), bool)
        eligible[row] = False
        return same + 1e-3 * rng.random(len(ids)), eligible

    sure = calibrate(by_status, ids, labels, embeddings, top_k=10, n_queries=60)
    assert sure is not None and sure.n_queries == 60
    assert sure.probabilities[0] == pytest.approx(1.0)
    assert all(a >= b for a, b in zip(sure.probabilities, sure.probabilities[1:], strict=False))

    def random(image_id):
        eligible = np.ones(len(ids), bool)
        eligible[image_id - 1] = False
        return rng.random(len(ids)), eligible

    chance = calibrate(random, ids, labels, embeddings, top_k=10, n_queries=115)
    present = np.nanmean(status)
    assert chance.chance == pytest.approx(present**2 + (1 - present) ** 2)
    assert abs(np.mean(chance.probabilities) - chance.chance) < 0.1
    assert -1.0 <= chance.nearest_low <= 1.0
    assert calibrate(random, ids[:5], labels[:5], embeddings[:5], 3, 5) is None  # too few labels


def test_large_archives_sample_fewer_calibration_queries() -> None:
    from chexretrieve.search.calibration import queries_for

    assert queries_for(3_000, 200) == 200
    assert queries_for(1_000_000, 200) == 20
    assert queries_for(200_000, 200) == 100
    assert queries_for(1_000_000, 10) == 10


@pytest.mark.parametrize("seed", range(6))
def test_the_best_first_positions_equal_a_full_stable_sort(seed) -> None:
    """best_first (a partition, then a sort of the best) against NumPy's stable sort of every
    value: ties in position order, NaN last, k past the end, small integers (many ties)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 400))
    values = rng.integers(-5, 6, size=n).astype(np.float64)  # many ties
    if seed % 2:
        values[rng.random(n) < 0.3] = np.nan
    if seed == 4:
        values = rng.standard_normal(n).astype(np.float32)
    for k in (0, 1, 2, 7, 12, n - 1, n, n + 5):
        reference = np.argsort(-values, kind="stable")[: max(k, 0)]
        assert np.array_equal(best_first(values, k), reference), (seed, k)
