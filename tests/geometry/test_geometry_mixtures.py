"""Gaussian-mixture and von Mises–Fisher-mixture geometries, their fits and the posterior GMM."""

from __future__ import annotations

import numpy as np
import pytest
from geometry_reference import (
    assert_matches_bregman,
    clustered_unit_rows,
    gmm_cgf,
    movmf_cgf,
    sphere_quadrature_s2,
    unit_rows,
)

from chexretrieve.geometry import fit_geometry
from chexretrieve.geometry.bessel import log_vmf_normalizer


@pytest.mark.parametrize(
    ("dim", "width"),
    [(512, 512 + 2 * 59 + 1), (16, 2 * 16 + 1)],
    ids=["shared-floor-span-layout", "full-layout"],
)
def test_gmm_divergence_is_bregman_of_the_explicit_mixture_cgf(dim, width):
    rng = np.random.default_rng(30)
    anchors = clustered_unit_rows(rng, 60, dim, 3, 0.04)
    geom = fit_geometry("gmm", anchors, inv_temperature=100.0, n_components=3, seed=0)
    assert geom.feature_dim == width
    cgf, grad = gmm_cgf(geom.weights, geom.means, geom.covariances)
    q, k = unit_rows(rng, 4, dim), anchors[:3]
    assert_matches_bregman(geom, cgf, grad, q, k, rtol=1e-9)


def test_gmm_fit_uses_the_regularised_em_and_is_deterministic():
    rng = np.random.default_rng(31)
    anchors = clustered_unit_rows(rng, 40, 16, 2, 0.1)
    first = fit_geometry("gmm", anchors, n_components=2, seed=3)
    second = fit_geometry("gmm", anchors, n_components=2, seed=3)
    np.testing.assert_array_equal(first.means, second.means)
    np.testing.assert_array_equal(first.covariances, second.covariances)
    for m, covariance in enumerate(first.covariances):
        w = first.weights[m]
        assert np.linalg.eigvalsh(covariance).min() >= 1e-5 * (1 - 1e-9)
        assert w == pytest.approx(1 / 2, abs=0.3)
    assert first.converged


def test_one_component_gmm_is_the_gaussian_with_the_covariance_floor():
    rng = np.random.default_rng(32)
    anchors = clustered_unit_rows(rng, 30, 20, 2, 0.2)
    gmm = fit_geometry("gmm", anchors, inv_temperature=50.0, n_components=1)
    gaussian = fit_geometry("gaussian", anchors, inv_temperature=50.0)
    a, b = unit_rows(rng, 5, 20), unit_rows(rng, 4, 20)
    floor = 0.5 * 50.0**2 * 1e-5 * ((a[:, None, :] - b[None, :, :]) ** 2).sum(axis=2)
    np.testing.assert_allclose(gmm.divergence(a, b), gaussian.divergence(a, b) + floor, atol=1e-9)
    np.testing.assert_allclose(gmm.similarity(a, b), gaussian.similarity(a, b) - floor, atol=1e-9)


def test_posterior_gmm_follows_the_dirichlet_niw_update():
    from sklearn.mixture import GaussianMixture

    rng = np.random.default_rng(33)
    dim = 5
    broad = clustered_unit_rows(rng, 200, dim, 3, 0.2)
    targets = clustered_unit_rows(rng, 9, dim, 2, 0.2)
    geom = fit_geometry("gmm", targets, prior=broad, n_components=3, seed=1)
    reference = GaussianMixture(
        3, reg_covar=1e-5, tol=1e-3, max_iter=200, init_params="kmeans", random_state=1
    ).fit(broad)
    resp = reference.predict_proba(targets)
    kappa0, nu0, alpha = 5.0, dim + 20.0, 1.0
    counts = resp.sum(axis=0)
    np.testing.assert_allclose(geom.weights, (alpha + counts) / (3 * alpha + len(targets)))
    for m in range(3):
        mean = resp[:, m] @ targets / counts[m]
        scatter = sum(
            r * np.outer(t - mean, t - mean) for r, t in zip(resp[:, m], targets, strict=True)
        )
        mu0, sigma0 = reference.means_[m], reference.covariances_[m]
        diff = mean - mu0
        psi = (nu0 - dim - 1) * sigma0 + scatter
        psi += kappa0 * counts[m] / (kappa0 + counts[m]) * np.outer(diff, diff)
        np.testing.assert_allclose(
            geom.covariances[m], psi / (nu0 + counts[m] - dim - 1), atol=1e-12
        )
        np.testing.assert_allclose(
            geom.means[m], (kappa0 * mu0 + counts[m] * mean) / (kappa0 + counts[m]), atol=1e-12
        )


def test_posterior_gmm_fits_the_broad_corpus_once(monkeypatch):
    """Posterior GMMs of different findings share one broad EM fit; any change of the corpus or of
    the EM settings fits again, and a reused fit gives exactly what a fresh one gives."""
    from sklearn.mixture import GaussianMixture

    import chexretrieve.geometry.mixtures as mixtures

    monkeypatch.setattr(mixtures, "_BROAD_FITS", type(mixtures._BROAD_FITS)())
    fits = []
    original = GaussianMixture.fit
    monkeypatch.setattr(GaussianMixture, "fit", lambda self, x: fits.append(1) or original(self, x))
    rng = np.random.default_rng(34)
    broad = clustered_unit_rows(rng, 150, 6, 3, 0.2)
    targets = [clustered_unit_rows(rng, 8, 6, 2, 0.2) for _ in range(3)]
    first = [fit_geometry("gmm", t, prior=broad, n_components=3, seed=2) for t in targets]
    assert len(fits) == 1
    fit_geometry("gmm", targets[0], prior=broad, n_components=2, seed=2)
    fit_geometry("gmm", targets[0], prior=broad[1:], n_components=3, seed=2)
    fit_geometry("gmm", targets[0], n_components=2, seed=2)  # target-only fits are never kept
    fit_geometry("gmm", targets[0], n_components=2, seed=2)
    assert len(fits) == 5
    mixtures._BROAD_FITS.clear()
    again = fit_geometry("gmm", targets[2], prior=broad, n_components=3, seed=2)
    np.testing.assert_array_equal(again.covariances, first[2].covariances)
    np.testing.assert_array_equal(again.weights, first[2].weights)


def test_posterior_gmm_tends_to_the_prior_and_to_the_target_fit():
    rng = np.random.default_rng(34)
    dim = 4
    centres = np.eye(dim)[:2]
    broad = clustered_unit_rows(rng, 400, dim, 2, 0.15)
    prior_fit = fit_geometry("gmm", broad, n_components=2, seed=0)
    vanished = fit_geometry("gmm", broad[:5], prior=broad, n_components=2, target_weight=0.0)
    np.testing.assert_allclose(vanished.means, prior_fit.means, atol=1e-12)
    np.testing.assert_allclose(vanished.covariances, prior_fit.covariances, atol=1e-12)
    np.testing.assert_allclose(vanished.weights, [0.5, 0.5])  # Dir(1) reset of the weights
    # many targets around two well separated directions: the posterior is the target fit
    picks = rng.integers(0, 2, 20000)
    targets = centres[picks] + 0.1 * rng.standard_normal((20000, dim))
    targets /= np.linalg.norm(targets, axis=1, keepdims=True)
    broad = centres[rng.integers(0, 2, 300)] + 0.3 * rng.standard_normal((300, dim))
    broad /= np.linalg.norm(broad, axis=1, keepdims=True)
    adapted = fit_geometry("gmm", targets, prior=broad, n_components=2, seed=0)
    own = fit_geometry("gmm", targets, n_components=2, seed=0)
    order = np.argsort(adapted.means[:, 0])
    own_order = np.argsort(own.means[:, 0])
    np.testing.assert_allclose(adapted.means[order], own.means[own_order], atol=2e-3)
    np.testing.assert_allclose(adapted.weights[order], own.weights[own_order], atol=2e-3)
    np.testing.assert_allclose(
        adapted.covariances[order], own.covariances[own_order], rtol=0.05, atol=2e-4
    )


def test_movmf_divergence_is_bregman_of_the_vmf_mixture_cgf_at_d512():
    rng = np.random.default_rng(35)
    anchors = clustered_unit_rows(rng, 45, 512, 3, 0.05)
    geom = fit_geometry("movmf", anchors, inv_temperature=100.0, n_components=3)
    cgf, grad = movmf_cgf(geom.weights, geom.directions, geom.concentrations)
    q, k = unit_rows(rng, 3, 512), anchors[:2]
    assert_matches_bregman(geom, cgf, grad, q, k, rtol=1e-9)


def test_movmf_cgf_matches_numerical_integration_on_s2():
    rng = np.random.default_rng(36)
    anchors = clustered_unit_rows(rng, 60, 3, 3, 0.3)
    geom = fit_geometry("movmf", anchors, inv_temperature=3.0, n_components=3)
    log_c = log_vmf_normalizer(3, geom.concentrations)

    def density(g):
        parts = np.exp(log_c + geom.concentrations * (g @ geom.directions.T))
        return parts @ geom.weights

    assert sphere_quadrature_s2(density) == pytest.approx(1.0, rel=1e-9)
    x = unit_rows(rng, 3, 3)
    cgf, grad = geom.cgf_and_gradient(x)
    for row, value, gradient in zip(x, cgf, grad, strict=True):
        eta = 3.0 * row
        mgf = sphere_quadrature_s2(lambda g, e=eta: np.exp(g @ e) * density(g))
        assert value == pytest.approx(np.log(mgf), rel=1e-9)
        for axis in range(3):
            moment = sphere_quadrature_s2(
                lambda g, e=eta, a=axis: g[:, a] * np.exp(g @ e) * density(g)
            )
            assert gradient[axis] == pytest.approx(moment / mgf, abs=1e-9)


def test_movmf_one_component_uses_the_mean_resultant_concentration_estimate():
    rng = np.random.default_rng(37)
    anchors = clustered_unit_rows(rng, 50, 10, 1, 0.3)
    geom = fit_geometry("movmf", anchors, n_components=1)
    resultant = anchors.mean(axis=0)
    r = np.linalg.norm(resultant)
    np.testing.assert_allclose(geom.directions[0], resultant / r, atol=1e-12)
    assert geom.concentrations[0] == pytest.approx(r * (10 - r**2) / (1 - r**2), rel=1e-12)


def test_movmf_em_finds_separated_directions_and_is_deterministic():
    rng = np.random.default_rng(38)
    dim = 8
    centres = np.eye(dim)[:3]
    picks = np.repeat(np.arange(3), [60, 30, 10])
    anchors = centres[picks] + 0.05 * rng.standard_normal((100, dim))
    anchors /= np.linalg.norm(anchors, axis=1, keepdims=True)
    geom = fit_geometry("movmf", anchors, n_components=3, seed=4)
    again = fit_geometry("movmf", anchors, n_components=3, seed=4)
    np.testing.assert_array_equal(geom.directions, again.directions)
    order = np.argmax(geom.directions @ centres.T, axis=1)
    assert sorted(order) == [0, 1, 2]
    np.testing.assert_allclose(geom.directions, centres[order], atol=0.03)
    np.testing.assert_allclose(geom.weights, np.array([0.6, 0.3, 0.1])[order], atol=1e-6)
    assert geom.converged


def test_single_anchor_components_are_capped_and_stay_finite():
    rng = np.random.default_rng(39)
    anchors = unit_rows(rng, 3, 512)
    geom = fit_geometry("movmf", anchors, inv_temperature=100.0, n_components=3)
    np.testing.assert_allclose(geom.concentrations, 1e5)
    x = np.vstack([anchors, unit_rows(rng, 4, 512)])
    for dtype in (np.float64, np.float32):
        assert np.isfinite(geom.features(x.astype(dtype))).all()
    div = geom.divergence(x, x)
    assert div.min() >= -1e-9 and np.abs(np.diag(div)).max() <= 1e-9


def test_movmf_weights_follow_the_tilted_component_masses():
    rng = np.random.default_rng(40)
    anchors = clustered_unit_rows(rng, 30, 6, 2, 0.2)
    geom = fit_geometry("movmf", anchors, inv_temperature=20.0, n_components=2)
    cgf, grad = movmf_cgf(geom.weights, geom.directions, geom.concentrations)
    x = unit_rows(rng, 2, 6)
    ours_cgf, ours_grad = geom.cgf_and_gradient(x)
    for row, value, gradient in zip(x, ours_cgf, ours_grad, strict=True):
        assert value == pytest.approx(cgf(20.0 * row), rel=1e-11)
        np.testing.assert_allclose(gradient, grad(20.0 * row), atol=1e-11)
