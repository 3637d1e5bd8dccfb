"""Gaussian, latent Gaussian and latent spherical models, plain and posterior (NIW, Bingham)."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from geometry_reference import (
    assert_matches_bregman,
    bregman,
    clustered_unit_rows,
    uniform_sphere_cgf_mp,
    unit_rows,
)

from chexretrieve.geometry import fit_geometry


def gaussian_cgf(mean, covariance):
    return (lambda xi: mean @ xi + 0.5 * xi @ covariance @ xi), (lambda xi: mean + covariance @ xi)


def projector(basis):
    return basis @ basis.T


def test_gaussian_divergence_is_bregman_of_the_fitted_gaussian_cgf_at_d512():
    rng = np.random.default_rng(20)
    anchors = clustered_unit_rows(rng, 50, 512, 4, 0.05)
    geom = fit_geometry("gaussian", anchors, inv_temperature=100.0)
    mean = anchors.mean(axis=0)
    covariance = (anchors - mean).T @ (anchors - mean) / len(anchors)
    np.testing.assert_allclose(geom.covariance, covariance, atol=1e-15)
    cgf, grad = gaussian_cgf(mean, covariance)
    q, k = unit_rows(rng, 5, 512), unit_rows(rng, 4, 512)
    assert_matches_bregman(geom, cgf, grad, q, k, rtol=1e-10)
    # the features only keep the r = N - 1 non-zero eigen-directions
    assert geom.feature_dim == 50


def test_latent_gaussian_uses_the_95_percent_subspace():
    rng = np.random.default_rng(21)
    anchors = clustered_unit_rows(rng, 60, 40, 5, 0.1)
    geom = fit_geometry("latent_gaussian", anchors, inv_temperature=100.0)
    centred = anchors - anchors.mean(axis=0)
    values, vectors = np.linalg.eigh(centred.T @ centred / len(anchors))
    values, vectors = values[::-1], vectors[:, ::-1]
    share = np.cumsum(values) / values.sum()
    k = int(np.argmax(share >= 0.95)) + 1
    assert geom.k == k
    assert geom.explained >= 0.95
    np.testing.assert_allclose(projector(geom.basis), projector(vectors[:, :k]), atol=1e-10)
    q, k_ = unit_rows(rng, 4, 40), unit_rows(rng, 3, 40)
    diff = q[:, None, :] - k_[None, :, :]
    naive = 0.5 * 100.0**2 * np.einsum("ijd,de,ije->ij", diff, projector(vectors[:, :k]), diff)
    np.testing.assert_allclose(geom.divergence(q, k_), naive, rtol=1e-9)
    assert np.abs(geom.similarity(q, k_) + naive).max() <= 1e-8


def test_latent_spherical_matches_the_bregman_divergence_of_the_uniform_sphere_cgf():
    rng = np.random.default_rng(22)
    anchors = clustered_unit_rows(rng, 40, 64, 6, 0.1)
    geom = fit_geometry("latent_spherical", anchors, inv_temperature=100.0, k=12)
    cgf, grad = uniform_sphere_cgf_mp(12)
    q, k = unit_rows(rng, 4, 64), unit_rows(rng, 3, 64)

    def latent_eta(x):
        u = geom.basis.T @ x
        return 100.0 * u / np.linalg.norm(u)

    naive = np.array([[bregman(cgf, grad, latent_eta(x), latent_eta(y)) for y in k] for x in q])
    np.testing.assert_allclose(geom.divergence(q, k), naive, rtol=1e-10, atol=1e-10)
    # closed form: inv_t · A_k(inv_t) · (1 − cos)
    with mpmath.workdps(30):
        ratio = float(mpmath.besseli(6, 100.0) / mpmath.besseli(5, 100.0))
    assert geom.scale == pytest.approx(100.0 * ratio, rel=1e-13)
    uq = (geom.basis.T @ q.T).T
    uk = (geom.basis.T @ k.T).T
    cos = (uq / np.linalg.norm(uq, axis=1, keepdims=True)) @ (
        uk / np.linalg.norm(uk, axis=1, keepdims=True)
    ).T
    assert np.abs(geom.similarity(q, k) + 100.0 * ratio * (1 - cos)).max() <= 1e-8


def test_explicit_k_above_the_anchor_rank_is_refused():
    rng = np.random.default_rng(23)
    anchors = unit_rows(rng, 6, 20)
    with pytest.raises(ValueError, match=r"k=6 exceeds the rank 5 of the anchor covariance"):
        fit_geometry("latent_gaussian", anchors, k=6)


def test_posterior_gaussian_follows_the_normal_inverse_wishart_update():
    rng = np.random.default_rng(24)
    dim = 6
    broad, targets = unit_rows(rng, 80, dim), clustered_unit_rows(rng, 7, dim, 1, 0.3)
    geom = fit_geometry("gaussian", targets, inv_temperature=10.0, prior=broad)
    mu0 = broad.mean(axis=0)
    sigma_broad = np.cov(broad.T, bias=True)
    kappa0, nu0, n = 5.0, dim + 20.0, len(targets)
    mean = targets.mean(axis=0)
    scatter = sum(np.outer(t - mean, t - mean) for t in targets)
    psi = (nu0 - dim - 1) * sigma_broad + scatter
    psi += kappa0 * n / (kappa0 + n) * np.outer(mean - mu0, mean - mu0)
    np.testing.assert_allclose(geom.covariance, psi / (nu0 + n - dim - 1), atol=1e-14)
    np.testing.assert_allclose(geom.mean, (kappa0 * mu0 + n * mean) / (kappa0 + n), atol=1e-14)


def test_posterior_gaussian_tends_to_the_prior_and_to_the_target_fit():
    rng = np.random.default_rng(25)
    dim = 4
    broad = unit_rows(rng, 200, dim)
    targets = clustered_unit_rows(rng, 20000, dim, 2, 0.2)
    prior_only = fit_geometry("gaussian", broad, inv_temperature=10.0)
    target_only = fit_geometry("gaussian", targets, inv_temperature=10.0)
    vanished = fit_geometry("gaussian", targets[:5], prior=broad, target_weight=0.0)
    np.testing.assert_allclose(vanished.covariance, prior_only.covariance, atol=1e-15)
    gaps = []
    for count in (200, 20000):
        adapted = fit_geometry("gaussian", targets[:count], inv_temperature=10.0, prior=broad)
        own = fit_geometry("gaussian", targets[:count], inv_temperature=10.0)
        gaps.append(np.abs(adapted.covariance - own.covariance).max())
    # the prior's pull shrinks like (ν0 − d − 1)/n
    assert gaps[1] < gaps[0] / 50
    assert gaps[1] < 5e-3 * np.abs(target_only.covariance).max()
    heavy = fit_geometry("gaussian", targets[:50], prior=broad, target_weight=1e9)
    light = fit_geometry("gaussian", targets[:50])
    np.testing.assert_allclose(heavy.covariance, light.covariance, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize("kind", ["latent_gaussian", "latent_spherical"])
def test_posterior_latent_subspace_tends_to_the_prior_and_to_the_target_fit(kind):
    rng = np.random.default_rng(26)
    dim = 12
    broad = clustered_unit_rows(rng, 300, dim, 6, 0.3)
    targets = clustered_unit_rows(rng, 40, dim, 3, 0.2)
    prior_fit = fit_geometry(kind, broad, k=3)
    target_fit = fit_geometry(kind, targets, k=3)
    vanished = fit_geometry(kind, targets, prior=broad, k=3, target_weight=0.0)
    np.testing.assert_allclose(projector(vanished.basis), projector(prior_fit.basis), atol=1e-10)
    adapted = fit_geometry(kind, targets, prior=broad, k=3)
    # β = (n/2)(1/ε − 1/(1+ε)) ≈ 2e9 for ε = 1e-8: the targets dominate the prior's α = 50
    assert adapted.beta == pytest.approx(20 * (1e8 - 1 / (1 + 1e-8)), rel=1e-12)
    np.testing.assert_allclose(projector(adapted.basis), projector(target_fit.basis), atol=1e-6)
    weak = fit_geometry(kind, targets, prior=broad, k=3, beta=1e-9)
    np.testing.assert_allclose(projector(weak.basis), projector(prior_fit.basis), atol=1e-6)


def _variance_rule(matrix, share=0.95):
    """Naive reference: the smallest k whose top eigenvalues hold ``share`` of the trace."""
    values, vectors = np.linalg.eigh(matrix)
    values, vectors = values[::-1], vectors[:, ::-1]
    values = np.clip(values, 0, None)
    total, running = values.sum(), 0.0
    for k, value in enumerate(values, start=1):
        running += value
        if running >= share * total - 1e-12 * total:
            return k, vectors
    return len(values), vectors


@pytest.mark.parametrize("kind", ["latent_gaussian", "latent_spherical"])
def test_posterior_latent_default_k_is_the_95_percent_rule_on_the_posterior(kind):
    """The default (no k): U_broad by the rule on the broad covariance, k by the rule on
    A_post = α U_broad U_broadᵀ + β Cov(targets) with the default β = (n/2)(1/ε − 1/(1+ε))."""
    rng = np.random.default_rng(27)
    dim = 40
    broad, targets = clustered_unit_rows(rng, 400, dim, 6, 0.05), unit_rows(rng, 12, dim)
    geom = fit_geometry(kind, targets, prior=broad)
    broad_k, broad_vectors = _variance_rule(np.cov(broad.T, bias=True))
    u_broad = broad_vectors[:, :broad_k]
    beta = (12 / 2.0) * (1e8 - 1.0 / (1.0 + 1e-8))
    k, post_vectors = _variance_rule(
        50.0 * u_broad @ u_broad.T + beta * np.cov(targets.T, bias=True)
    )
    assert geom.k == k < dim
    np.testing.assert_allclose(projector(geom.basis), projector(post_vectors[:, :k]), atol=1e-8)
    # the weak-target posterior keeps more of the prior's directions, by the same rule
    weak = fit_geometry(kind, targets, prior=broad, beta=5.0)
    k_weak, weak_vectors = _variance_rule(
        50.0 * u_broad @ u_broad.T + 5.0 * np.cov(targets.T, bias=True)
    )
    assert weak.k == k_weak > k
    np.testing.assert_allclose(
        projector(weak.basis), projector(weak_vectors[:, :k_weak]), atol=1e-8
    )


def _rank_orders(scores):
    return np.argsort(-scores, axis=1, kind="stable")


@pytest.mark.parametrize("kind", ["latent_gaussian", "latent_spherical"])
def test_posterior_latent_default_ranks_differently_from_cosine(kind):
    rng = np.random.default_rng(31)
    dim = 128  # the phantom encoder's d, where the paper's k = 128 was cosine in disguise
    broad, targets = unit_rows(rng, 600, dim), clustered_unit_rows(rng, 20, dim, 2, 0.3)
    queries, keys = unit_rows(rng, 5, dim), unit_rows(rng, 60, dim)
    geom = fit_geometry(kind, targets, prior=broad)
    assert geom.k < dim
    ours = _rank_orders(geom.similarity(queries, keys))
    cosine = _rank_orders(queries @ keys.T)
    assert (ours != cosine).any(axis=1).all()  # every query's ranking differs


@pytest.mark.parametrize("kind", ["latent_gaussian", "latent_spherical"])
def test_a_latent_model_spanning_the_whole_space_is_refused_as_cosine(kind):
    """k = d: UUᵀ = I, so the ranking is cosine's (shown here on the math), and it is refused."""
    from chexretrieve.geometry import CosineEquivalentGeometryError

    rng = np.random.default_rng(32)
    dim = 12
    broad, targets = unit_rows(rng, 200, dim), unit_rows(rng, 40, dim)
    queries, keys = unit_rows(rng, 4, dim), unit_rows(rng, 30, dim)
    # the rationale: any orthonormal d x d basis ranks as cosine
    basis = np.linalg.qr(rng.normal(size=(dim, dim)))[0]
    pq, pk = queries @ basis, keys @ basis
    distance = np.linalg.norm(pq[:, None, :] - pk[None], axis=2)  # latent Gaussian
    np.testing.assert_array_equal(_rank_orders(-distance), _rank_orders(queries @ keys.T))
    unit_q = pq / np.linalg.norm(pq, axis=1, keepdims=True)  # latent spherical
    unit_k = pk / np.linalg.norm(pk, axis=1, keepdims=True)
    np.testing.assert_array_equal(_rank_orders(unit_q @ unit_k.T), _rank_orders(queries @ keys.T))
    with pytest.raises(
        CosineEquivalentGeometryError, match=r"k = 12 = d .*ranks exactly as cosine"
    ):
        fit_geometry(kind, targets, prior=broad, k=dim)
    with pytest.raises(CosineEquivalentGeometryError, match="as given"):
        fit_geometry(kind, targets, k=dim)  # target-only, 40 anchors span all 12 directions
    # the refusal is a ValueError: every caller that reports bad options reports it
    assert issubclass(CosineEquivalentGeometryError, ValueError)
    # the default rule can land on d too (isotropic targets): refused, naming the rule
    axes = np.vstack([np.eye(3), -np.eye(3)])
    with pytest.raises(CosineEquivalentGeometryError, match="95%-variance rule"):
        fit_geometry(kind, axes, prior=unit_rows(rng, 50, 3))
    assert fit_geometry(kind, targets, prior=broad, k=dim - 1).k == dim - 1


def test_posterior_bingham_matrix_is_prior_plus_scaled_target_covariance():
    rng = np.random.default_rng(28)
    dim = 10
    broad, targets = unit_rows(rng, 100, dim), clustered_unit_rows(rng, 15, dim, 2, 0.2)
    geom = fit_geometry("latent_spherical", targets, prior=broad, k=4, beta=3.0, alpha=50.0)
    values, vectors = np.linalg.eigh(np.cov(broad.T, bias=True))
    u_broad = vectors[:, ::-1][:, :4]
    a_post = 50.0 * u_broad @ u_broad.T + 3.0 * np.cov(targets.T, bias=True)
    post_values, post_vectors = np.linalg.eigh(a_post)
    np.testing.assert_allclose(
        projector(geom.basis), projector(post_vectors[:, ::-1][:, :4]), atol=1e-10
    )


def test_posterior_k_by_the_variance_rule_on_the_bingham_matrix():
    """k="variance": the prior's directions explain 95% of the broad covariance, k explains 95% of
    the posterior Bingham matrix, both computed here with numpy from the formulas."""
    rng = np.random.default_rng(29)
    dim = 10
    broad, targets = clustered_unit_rows(rng, 200, dim, 4, 0.4), unit_rows(rng, 6, dim)
    geom = fit_geometry("latent_gaussian", targets, prior=broad, k="variance", beta=0.5)

    def rule(matrix):
        values, vectors = np.linalg.eigh(matrix)
        values, vectors = values[::-1], vectors[:, ::-1]
        share = np.cumsum(values) / values.sum()
        return int(np.argmax(share >= 0.95 - 1e-12) + 1), vectors

    broad_k, broad_vectors = rule(np.cov(broad.T, bias=True))
    u_broad = broad_vectors[:, :broad_k]
    k, post_vectors = rule(50.0 * u_broad @ u_broad.T + 0.5 * np.cov(targets.T, bias=True))
    assert geom.k == k < dim
    np.testing.assert_allclose(projector(geom.basis), projector(post_vectors[:, :k]), atol=1e-8)
    # without a prior, k="variance" is the target-only models' default rule
    plain = fit_geometry("latent_gaussian", targets, k="variance")
    assert plain.k == fit_geometry("latent_gaussian", targets).k


def test_latent_spherical_refuses_an_image_orthogonal_to_the_subspace():
    anchors = np.array([[1.0, 0, 0], [0.8, 0.6, 0], [0.6, 0.8, 0], [0, 1.0, 0]])
    geom = fit_geometry("latent_spherical", anchors, k=1)
    with pytest.raises(ValueError, match="orthogonal to the latent subspace"):
        geom.features(np.array([[0.0, 0.0, 1.0]]))
