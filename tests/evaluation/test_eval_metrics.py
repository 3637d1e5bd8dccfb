"""AUPRC against scikit-learn's average_precision_score, ties included."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from chexretrieve.metrics import average_precision_rows


def _sklearn_rows(scores, relevance):
    return np.array([average_precision_score(r, s) for s, r in zip(scores, relevance, strict=True)])


@pytest.mark.parametrize("levels", [None, 3, 2])
def test_matches_sklearn_untied_and_tied(levels):
    rng = np.random.default_rng(levels or 0)
    scores = rng.normal(size=(40, 57))
    if levels is not None:  # heavy ties: only a few distinct score values per row
        scores = np.round(scores * levels / 3.0)
    relevance = rng.random((40, 57)) < 0.3
    relevance[:, 0] = True  # every row has a relevant key
    ours = average_precision_rows(scores, relevance)
    np.testing.assert_allclose(ours, _sklearn_rows(scores, relevance), rtol=0, atol=1e-12)


def test_shared_relevance_vector_and_float32():
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 4, size=(7, 30)).astype(np.float32)
    relevance = rng.random(30) < 0.4
    ours = average_precision_rows(scores, relevance)
    expected = _sklearn_rows(scores, np.broadcast_to(relevance, scores.shape))
    np.testing.assert_allclose(ours, expected, atol=1e-12)


def test_hand_computed_values():
    # ranking: R N R N -> (1/1 + 2/3) / 2
    assert average_precision_rows(np.array([[4.0, 3, 2, 1]]), np.array([1, 0, 1, 0]))[0] == (
        pytest.approx((1 + 2 / 3) / 2)
    )
    # all four tied, two relevant: precision at the single threshold = 2/4
    assert average_precision_rows(np.zeros((1, 4)), np.array([1, 0, 1, 0]))[0] == pytest.approx(0.5)
    # perfect and worst rankings
    assert average_precision_rows(np.array([[3.0, 2, 1]]), np.array([1, 0, 0]))[0] == 1.0
    assert average_precision_rows(np.array([[3.0, 2, 1]]), np.array([0, 0, 1]))[0] == pytest.approx(
        1 / 3
    )


def test_minus_inf_excludes_a_key_exactly():
    rng = np.random.default_rng(2)
    scores = rng.normal(size=(1, 20))
    relevance = rng.random(20) < 0.5
    relevance[3] = True
    dropped = average_precision_rows(np.delete(scores, 5, axis=1), np.delete(relevance, 5))
    scores_x, relevance_x = scores.copy(), relevance.copy()
    scores_x[0, 5], relevance_x[5] = -np.inf, False
    assert average_precision_rows(scores_x, relevance_x)[0] == pytest.approx(dropped[0])


def test_no_relevant_key_is_zero_like_sklearn():
    assert average_precision_rows(np.array([[0.3, 0.1]]), np.array([0, 0]))[0] == 0.0


def test_bad_input_messages():
    with pytest.raises(ValueError, match="one relevance flag per key"):
        average_precision_rows(np.zeros((2, 3)), np.zeros(4, dtype=bool))
    with pytest.raises(ValueError, match="NaN"):
        average_precision_rows(np.array([[np.nan, 1.0]]), np.array([1, 0]))
    with pytest.raises(ValueError, match="empty key list"):
        average_precision_rows(np.zeros((2, 0)), np.zeros((2, 0), dtype=bool))
