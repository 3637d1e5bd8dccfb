"""Softmax anchor divergence: literal KL, low-rank features, chunking, mixtures, Theorem 3."""

from __future__ import annotations

import numpy as np
import pytest
from geometry_reference import softmax_kl, softmax_vector, symmetrised, unit_rows
from hypothesis import given, settings
from hypothesis import strategies as st

from chexretrieve.geometry import fit_geometry, mix_anchor_sets
from chexretrieve.geometry.bessel import vmf_mean_length


def literal_kl_matrix(anchors, weights, inv_t, a, b):
    return np.array([[softmax_kl(anchors, weights, inv_t, x, y) for y in b] for x in a])


@pytest.mark.parametrize("inv_t", [7.0, 100.0])
def test_divergence_is_literal_kl_of_softmax_vectors(inv_t):
    rng = np.random.default_rng(1)
    anchors = unit_rows(rng, 30, 16)
    weights = rng.uniform(0.2, 1.0, 30)
    geom = fit_geometry("softmax", anchors, inv_temperature=inv_t, weights=weights)
    a, b = unit_rows(rng, 5, 16), unit_rows(rng, 4, 16)
    expected = literal_kl_matrix(anchors, weights / weights.sum(), inv_t, a, b)
    np.testing.assert_allclose(geom.divergence(a, b), expected, rtol=1e-9, atol=1e-9)


def test_score_from_features_equals_naive_symmetrised_kl_at_d512():
    rng = np.random.default_rng(2)
    anchors = unit_rows(rng, 60, 512)
    geom = fit_geometry("softmax", anchors, inv_temperature=100.0)
    q, k = unit_rows(rng, 6, 512), unit_rows(rng, 5, 512)
    uniform = np.full(60, 1 / 60)
    naive = symmetrised(
        literal_kl_matrix(anchors, uniform, 100.0, q, k),
        literal_kl_matrix(anchors, uniform, 100.0, k, q),
    )
    score = geom.score(geom.features(q), geom.features(k))
    assert np.abs(score + naive).max() <= 1e-8
    np.testing.assert_allclose(geom.similarity(q, k), score, rtol=0, atol=1e-12)


def test_cgf_and_gradient_are_log_mean_exp_and_softmax_mean():
    rng = np.random.default_rng(3)
    anchors = unit_rows(rng, 25, 8)
    geom = fit_geometry("softmax", anchors, inv_temperature=30.0)
    x = unit_rows(rng, 3, 8)
    cgf, grad = geom.cgf_and_gradient(x)
    for row, value, gradient in zip(x, cgf, grad, strict=True):
        logits = 30.0 * anchors @ row
        assert value == pytest.approx(np.log(np.mean(np.exp(logits))), rel=1e-12)
        np.testing.assert_allclose(gradient, softmax_vector(logits) @ anchors, atol=1e-12)


@pytest.mark.parametrize(("count", "dim"), [(10, 32), (100, 32), (2, 5)])
def test_feature_length_is_at_most_twice_the_centred_anchor_rank_plus_one(count, dim):
    rng = np.random.default_rng(4)
    geom = fit_geometry("softmax", unit_rows(rng, count, dim), inv_temperature=50.0)
    assert geom.feature_dim == 2 * min(count - 1, dim) + 1
    assert geom.features(unit_rows(rng, 3, dim)).shape == (3, geom.feature_dim)


def test_anchor_chunking_does_not_change_features():
    rng = np.random.default_rng(5)
    anchors = unit_rows(rng, 50, 24)
    x = unit_rows(rng, 9, 24)
    whole = fit_geometry("softmax", anchors, inv_temperature=100.0).features(x)
    chunked = fit_geometry("softmax", anchors, inv_temperature=100.0, anchor_chunk=7).features(x)
    np.testing.assert_allclose(chunked, whole, rtol=1e-12, atol=1e-10)


def test_float32_gallery_gives_float32_features_close_to_float64():
    rng = np.random.default_rng(6)
    anchors = unit_rows(rng, 200, 512)
    geom = fit_geometry("softmax", anchors, inv_temperature=100.0)
    q, k = unit_rows(rng, 8, 512), unit_rows(rng, 50, 512)
    exact = geom.score(geom.features(q), geom.features(k))
    f32 = geom.features(k.astype(np.float32))
    assert f32.dtype == np.float32
    approx = geom.score(geom.features(q.astype(np.float32)), f32)
    assert approx.dtype == np.float32
    assert np.isfinite(approx).all()
    assert np.abs(approx - exact).max() <= 1e-4 * np.abs(exact).max()


def test_duplicating_an_anchor_equals_doubling_its_weight():
    rng = np.random.default_rng(7)
    anchors = unit_rows(rng, 12, 10)
    doubled = fit_geometry("softmax", np.vstack([anchors, anchors[:1]]), inv_temperature=20.0)
    weights = np.ones(12)
    weights[0] = 2.0
    weighted = fit_geometry("softmax", anchors, inv_temperature=20.0, weights=weights)
    a, b = unit_rows(rng, 4, 10), unit_rows(rng, 3, 10)
    np.testing.assert_allclose(doubled.divergence(a, b), weighted.divergence(a, b), atol=1e-12)


def test_mixture_of_two_anchor_sets():
    rng = np.random.default_rng(8)
    set_a, set_b = unit_rows(rng, 10, 12), unit_rows(rng, 25, 12)
    a, b = unit_rows(rng, 4, 12), unit_rows(rng, 3, 12)
    only_a = fit_geometry("softmax", set_a, inv_temperature=40.0).divergence(a, b)
    anchors, weights = mix_anchor_sets(set_a, set_b, 1.0)
    assert anchors.shape == (35, 12)
    assert weights.sum() == pytest.approx(1.0)
    pure = fit_geometry("softmax", anchors, inv_temperature=40.0, weights=weights)
    np.testing.assert_allclose(pure.divergence(a, b), only_a, atol=1e-12)
    anchors, weights = mix_anchor_sets(set_a, set_b, 0.3)
    np.testing.assert_allclose(weights[:10], 0.03)
    np.testing.assert_allclose(weights[10:], 0.7 / 25)
    mixed = fit_geometry("softmax", anchors, inv_temperature=40.0, weights=weights)
    np.testing.assert_allclose(
        mixed.divergence(a, b), literal_kl_matrix(anchors, weights, 40.0, a, b), atol=1e-10
    )


def test_anchor_contributions_are_nonnegative_and_sum_to_the_symmetrised_kl():
    rng = np.random.default_rng(9)
    anchors = unit_rows(rng, 40, 32)
    geom = fit_geometry("softmax", anchors, inv_temperature=100.0)
    q, k = unit_rows(rng, 3, 32), unit_rows(rng, 3, 32)
    parts = geom.anchor_contributions(q[0], k[0])
    assert parts.shape == (40,)
    assert (parts >= 0).all()
    assert parts.sum() == pytest.approx(-geom.similarity(q[:1], k[:1])[0, 0], rel=1e-9)
    rows = geom.anchor_contributions(q, k)
    np.testing.assert_allclose(rows.sum(axis=1), -np.diag(geom.similarity(q, k)), rtol=1e-9)
    with pytest.raises(ValueError, match="row by row"):
        geom.anchor_contributions(q, k[:2])


def test_anchor_probabilities_are_the_softmax():
    rng = np.random.default_rng(10)
    anchors = unit_rows(rng, 6, 5)
    weights = np.array([1.0, 0.0, 1.0, 2.0, 1.0, 1.0])
    geom = fit_geometry("softmax", anchors, inv_temperature=9.0, weights=weights)
    x = unit_rows(rng, 1, 5)
    probs = geom.anchor_probabilities(x)[0]
    logits = 9.0 * anchors @ x[0] + np.log(np.where(weights > 0, weights, 1e-300))
    np.testing.assert_allclose(probs, softmax_vector(logits), atol=1e-12)
    assert probs[1] == 0.0


def test_theorem_3_softmax_divergence_approaches_the_uniform_sphere_population_divergence():
    dim, inv_t = 3, 5.0
    rng = np.random.default_rng(11)
    l1, l2 = unit_rows(rng, 15, dim), unit_rows(rng, 15, dim)
    # population divergence of the uniform sphere CGF: inv_t·A_d(inv_t)·(1 − λ1ᵀλ2)
    population = inv_t * vmf_mean_length(dim, np.array([inv_t]))[0] * (1 - l1 @ l2.T)
    errors = []
    for count in (100, 1000, 10000):
        per_seed = []
        for seed in range(5):
            anchors = unit_rows(np.random.default_rng(10_000 * count + seed), count, dim)
            geom = fit_geometry("softmax", anchors, inv_temperature=inv_t)
            per_seed.append(np.abs(geom.divergence(l1, l2) - population).max())
        errors.append(np.mean(per_seed))
    assert errors[0] > 2 * errors[1] > 4 * errors[2]
    assert errors[2] < 0.025 * population.max()


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    count=st.integers(2, 40),
    dim=st.integers(2, 12),
    inv_t=st.floats(0.5, 100.0),
)
def test_divergence_is_nonnegative_zero_on_the_diagonal_and_score_symmetric(
    seed, count, dim, inv_t
):
    rng = np.random.default_rng(seed)
    anchors = unit_rows(rng, count, dim)
    if np.linalg.matrix_rank(anchors - anchors.mean(axis=0)) == 0:
        return
    geom = fit_geometry("softmax", anchors, inv_temperature=inv_t)
    x = unit_rows(rng, 5, dim)
    div = geom.divergence(x, x)
    scale = inv_t * 2
    assert div.min() >= -1e-12 * scale
    assert np.abs(np.diag(div)).max() <= 1e-12 * scale
    sim = geom.similarity(x, x)
    np.testing.assert_allclose(sim, sim.T, atol=1e-11 * scale)
    np.testing.assert_allclose(sim, -symmetrised(div, div), atol=1e-10 * scale)
