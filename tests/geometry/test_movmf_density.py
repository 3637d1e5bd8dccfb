"""The vMF mixture density of the embedding space and its two baselines (Gaussian, k-NN).

References are written out here independently: a loop-by-loop EM with κ found by bisection on
ratios of plain scipy Bessel functions, sampling by scipy.stats.vonmises_fisher, Monte Carlo
integration over the sphere, scikit-learn's Ledoit–Wolf, scipy's multivariate normal.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import iv
from scipy.stats import multivariate_normal, vonmises_fisher

from chexretrieve.geometry.density_baselines import (
    GaussianDensity,
    KnnCosineScore,
    ledoit_wolf_covariance,
)
from chexretrieve.geometry.movmf_density import (
    MovMFDensity,
    banerjee_concentration,
    fit_movmf_density,
    select_movmf_density,
    solve_concentration,
)


def _unit(rows):
    rows = np.asarray(rows, dtype=np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _mixture_sample(rng, dim, directions, kappas, counts):
    parts = [
        vonmises_fisher(mu, kappa).rvs(n, random_state=rng)
        for mu, kappa, n in zip(directions, kappas, counts, strict=True)
    ]
    return np.vstack(parts)


def _naive_em(x, labels, n_components, iterations):
    """Soft-moVMF EM, one loop per sum; κ by bisection on I_{d/2}(κ)/I_{d/2−1}(κ) = r̄."""
    n, d = x.shape
    resp = [[1.0 if labels[i] == k else 0.0 for k in range(n_components)] for i in range(n)]
    history = []
    for _ in range(iterations):
        weights, directions, kappas = [], [], []
        for k in range(n_components):
            total = sum(resp[i][k] for i in range(n))
            resultant = np.zeros(d)
            for i in range(n):
                resultant += resp[i][k] * x[i]
            length = math.sqrt(float(resultant @ resultant))
            weights.append(total / n)
            directions.append(resultant / length)
            r_bar = length / total
            kappas.append(brentq(lambda t, r=r_bar: iv(d / 2, t) / iv(d / 2 - 1, t) - r, 1e-8, 500))
        log_total = 0.0
        for i in range(n):
            terms = []
            for k in range(n_components):
                kappa = kappas[k]
                log_c = (d / 2 - 1) * math.log(kappa) - (d / 2) * math.log(2 * math.pi)
                log_c -= math.log(iv(d / 2 - 1, kappa))
                terms.append(math.log(weights[k]) + log_c + kappa * float(directions[k] @ x[i]))
            top = max(terms)
            log_p = top + math.log(sum(math.exp(t - top) for t in terms))
            resp[i] = [math.exp(t - log_p) for t in terms]
            log_total += log_p
        history.append(log_total / n)
    return np.array(weights), np.array(directions), np.array(kappas), history


def test_em_matches_a_naive_loop_reference_step_by_step():
    rng = np.random.default_rng(0)
    dim = 5
    x = _mixture_sample(rng, dim, _unit(rng.normal(size=(3, dim))), [8.0, 15.0, 4.0], [40, 30, 30])
    labels = rng.integers(0, 3, size=len(x))
    weights, directions, kappas, history = _naive_em(x, labels, 3, 6)
    fitted = fit_movmf_density(x, 3, tol=0.0, max_iter=6, initial_labels=labels)
    np.testing.assert_allclose(fitted.weights, weights, rtol=1e-9)
    np.testing.assert_allclose(fitted.directions, directions, atol=1e-9)
    np.testing.assert_allclose(fitted.concentrations, kappas, rtol=1e-7)
    np.testing.assert_allclose(fitted.history, history, rtol=1e-9)
    # the fitted parameters' log-density equals the formula written out with plain iv
    point = x[:4]
    expected = []
    for row in point:
        total = 0.0
        for w, mu, kappa in zip(weights, directions, kappas, strict=True):
            c = kappa ** (dim / 2 - 1) / ((2 * math.pi) ** (dim / 2) * iv(dim / 2 - 1, kappa))
            total += w * c * math.exp(kappa * float(mu @ row))
        expected.append(math.log(total))
    np.testing.assert_allclose(fitted.log_density(point), expected, rtol=1e-8)


@pytest.mark.parametrize("dim", [3, 64, 512])
def test_newton_concentration_solves_the_mean_length_equation_better_than_banerjee(dim):
    targets = np.array([0.05, 0.3, 0.6, 0.9, 0.99])
    kappa = solve_concentration(dim, targets)
    mpmath.mp.dps = 30
    for target, value in zip(targets, kappa, strict=True):
        # arbitrary-precision Bessel ratio: no under- or overflow at d = 512
        ratio = mpmath.besseli(dim / 2, value) / mpmath.besseli(dim / 2 - 1, value)
        assert float(ratio) == pytest.approx(target, abs=1e-9)
    start = banerjee_concentration(dim, targets)
    assert np.abs(start - kappa).max() > 0  # the refinement does something in every dimension
    assert solve_concentration(dim, np.array([0.999999]), max_concentration=50.0)[0] == 50.0


def test_fit_recovers_a_known_mixture_and_bic_and_heldout_choose_its_size():
    rng = np.random.default_rng(1)
    dim = 10
    truth = _unit(np.eye(dim)[:3] + 0.1 * rng.normal(size=(3, dim)))
    kappas, counts = np.array([30.0, 60.0, 120.0]), np.array([600, 900, 500])
    x = _mixture_sample(rng, dim, truth, kappas, counts)
    fitted = fit_movmf_density(x, 3, seed=2)
    match = np.argmax(fitted.directions @ truth.T, axis=0)
    assert sorted(match) == [0, 1, 2]
    assert (np.sum(fitted.directions[match] * truth, axis=1) > 0.995).all()
    np.testing.assert_allclose(fitted.concentrations[match], kappas, rtol=0.12)
    np.testing.assert_allclose(fitted.weights[match], counts / counts.sum(), atol=0.02)
    bic = select_movmf_density(x, candidates=(1, 2, 3, 4, 6), criterion="bic", seed=0)
    held = select_movmf_density(x, candidates=(1, 2, 3, 4, 6), criterion="heldout", seed=0)
    assert bic.density.n_components == 3
    assert held.density.n_components in (3, 4)  # held-out likelihood may keep a tiny extra part
    assert held.scores[3] > held.scores[2] + 0.5
    assert len(held.heldout_rows) == 400 and held.heldout_log_density.shape == (400,)


@pytest.mark.parametrize(("dim", "components", "seed"), [(32, 8, 0), (32, 20, 1), (512, 4, 2)])
def test_log_likelihood_never_decreases_over_em_iterations(dim, components, seed):
    rng = np.random.default_rng(seed)
    x = _mixture_sample(rng, dim, _unit(rng.normal(size=(4, dim))), [50.0, 80, 20, 200], [60] * 4)
    fitted = fit_movmf_density(x, components, seed=seed, tol=0.0, max_iter=40)
    history = np.array(fitted.history)
    assert len(history) >= 20  # tol=0 stops only at a fixed point
    assert (np.diff(history) >= -1e-9 * np.abs(history[1:])).all()
    assert history[-1] > history[0]


@pytest.mark.parametrize("dim", [3, 4])
def test_log_density_integrates_to_one_over_the_sphere(dim):
    rng = np.random.default_rng(5)
    density = MovMFDensity(
        np.array([0.3, 0.7]), _unit(rng.normal(size=(2, dim))), np.array([2.0, 6.0])
    )
    uniform = _unit(rng.normal(size=(400_000, dim)))
    area = 2 * math.pi ** (dim / 2) / math.gamma(dim / 2)
    integral = area * np.exp(density.log_density(uniform)).mean()
    assert integral == pytest.approx(1.0, abs=0.01)


def test_fit_is_deterministic_under_a_seed_and_round_trips_through_arrays():
    rng = np.random.default_rng(6)
    x = _mixture_sample(rng, 16, _unit(rng.normal(size=(3, 16))), [40.0, 40, 40], [100] * 3)
    first, second = fit_movmf_density(x, 5, seed=9), fit_movmf_density(x, 5, seed=9)
    np.testing.assert_array_equal(first.directions, second.directions)
    np.testing.assert_array_equal(first.concentrations, second.concentrations)
    loaded = MovMFDensity.from_arrays(first.to_arrays())
    np.testing.assert_array_equal(loaded.log_density(x), first.log_density(x))
    posterior = first.posterior(x)
    np.testing.assert_allclose(posterior.sum(axis=1), 1.0)


def test_bad_input_is_rejected_with_a_reason():
    rng = np.random.default_rng(7)
    x = _unit(rng.normal(size=(10, 4)))
    with pytest.raises(ValueError, match="L2-normalise"):
        fit_movmf_density(2 * x, 2)
    with pytest.raises(ValueError, match="exceeds the number of embeddings"):
        fit_movmf_density(x, 11)
    with pytest.raises(ValueError, match="criterion"):
        select_movmf_density(x, criterion="aic")
    fitted = fit_movmf_density(x, 2)
    with pytest.raises(ValueError, match="dimension"):
        fitted.log_density(_unit(rng.normal(size=(2, 5))))


def test_gaussian_baseline_matches_sklearn_ledoit_wolf_and_scipy_logpdf():
    from sklearn.covariance import LedoitWolf

    rng = np.random.default_rng(8)
    x = _unit(rng.normal(size=(30, 40)) + 2.0 * np.eye(40)[0])
    mean, covariance, shrinkage = ledoit_wolf_covariance(x)
    reference = LedoitWolf().fit(x)
    np.testing.assert_allclose(covariance, reference.covariance_, rtol=1e-10, atol=1e-14)
    assert shrinkage == pytest.approx(reference.shrinkage_, rel=1e-10)
    gaussian = GaussianDensity.fit(x)
    queries = _unit(rng.normal(size=(5, 40)))
    expected = multivariate_normal(mean, covariance).logpdf(queries)
    np.testing.assert_allclose(gaussian.log_density(queries), expected, rtol=1e-9)


def test_knn_score_matches_a_loop_and_leaves_each_archive_image_out():
    rng = np.random.default_rng(9)
    archive = _unit(rng.normal(size=(25, 6)))
    knn = KnnCosineScore(archive, k=3)
    queries = _unit(rng.normal(size=(4, 6)))
    for row, value in zip(queries, knn.score(queries), strict=True):
        cosines = sorted((float(row @ a) for a in archive), reverse=True)
        assert value == pytest.approx(sum(cosines[:3]) / 3)
    own = knn.score(archive, leave_one_out=True, batch=7)
    for i, value in enumerate(own):
        cosines = sorted((float(archive[i] @ a) for j, a in enumerate(archive) if j != i))
        assert value == pytest.approx(sum(cosines[-3:]) / 3)
    with pytest.raises(ValueError, match="at least 4"):
        KnnCosineScore(archive[:3], k=3)


def test_row_logsumexp_matches_scipy_including_minus_infinity():
    from scipy.special import logsumexp

    from chexretrieve.geometry.movmf_density import logsumexp_rows

    rng = np.random.default_rng(10)
    values = rng.normal(scale=300.0, size=(7, 64))
    values[0, :5] = -np.inf
    np.testing.assert_allclose(logsumexp_rows(values), logsumexp(values, axis=1), rtol=1e-12)
