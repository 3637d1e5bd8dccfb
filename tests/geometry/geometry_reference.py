"""Naive reference versions of the geometry formulas, written plainly (loops, explicit sums).

They are slow and obviously right; the package's fast paths are tested against them.
"""

from __future__ import annotations

import functools

import mpmath
import numpy as np


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def clustered_unit_rows(rng, n: int, d: int, centres: int, spread: float) -> np.ndarray:
    """Unit vectors around a few random directions (anchor sets with structure)."""
    middle = unit_rows(rng, centres, d)
    picks = rng.integers(0, centres, n)
    x = middle[picks] + spread * rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def softmax_vector(logits: np.ndarray) -> np.ndarray:
    top = max(logits)
    exps = [np.exp(v - top) for v in logits]
    total = sum(exps)
    return np.array([v / total for v in exps])


def softmax_kl(anchors, weights, inv_t, x1, x2) -> float:
    """KL(P(.|x1) || P(.|x2)) as the literal sum over anchors of p log(p / q)."""
    logw = np.log(weights)
    p = softmax_vector([inv_t * float(x1 @ a) + lw for a, lw in zip(anchors, logw, strict=True)])
    q = softmax_vector([inv_t * float(x2 @ a) + lw for a, lw in zip(anchors, logw, strict=True)])
    return float(sum(pi * np.log(pi / qi) for pi, qi in zip(p, q, strict=True) if pi > 0))


def bregman(cgf, grad, eta1, eta2) -> float:
    """B_κ(η2 ‖ η1) = κ(η2) − κ(η1) − ∇κ(η1)ᵀ(η2 − η1), for one pair."""
    return float(cgf(eta2) - cgf(eta1) - grad(eta1) @ (eta2 - eta1))


def divergence_matrix(cgf, grad, inv_t, a, b) -> np.ndarray:
    """d(a_i ‖ b_j) = B_κ(inv_t b_j ‖ inv_t a_i), pair by pair."""
    out = np.empty((len(a), len(b)))
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            out[i, j] = bregman(cgf, grad, inv_t * x, inv_t * y)
    return out


def symmetrised(div_ab: np.ndarray, div_ba: np.ndarray) -> np.ndarray:
    return 0.5 * (div_ab + div_ba.T)


def assert_matches_bregman(geom, cgf, grad, q, k, rtol: float) -> None:
    """divergence(q, k) is B_κ pair by pair, and score from features is −(its symmetrisation).

    The score must match to 1e-8 in absolute terms (float64).
    """
    inv_t = geom.inv_temperature
    naive_qk = divergence_matrix(cgf, grad, inv_t, q, k)
    np.testing.assert_allclose(geom.divergence(q, k), naive_qk, rtol=rtol, atol=rtol)
    naive_sym = symmetrised(naive_qk, divergence_matrix(cgf, grad, inv_t, k, q))
    assert np.abs(geom.score(geom.features(q), geom.features(k)) + naive_sym).max() <= 1e-8


def gmm_cgf(weights, means, covariances):
    """κ(ξ) = log Σ_m π_m exp(μ_mᵀξ + ½ξᵀΣ_mξ) by explicit log-sum-exp, and its gradient."""

    def terms(xi):
        return np.array(
            [
                np.log(w) + mu @ xi + 0.5 * xi @ cov @ xi
                for w, mu, cov in zip(weights, means, covariances, strict=True)
            ]
        )

    def cgf(xi):
        t = terms(xi)
        top = t.max()
        return top + np.log(np.sum(np.exp(t - top)))

    def grad(xi):
        r = softmax_vector(terms(xi))
        return sum(rm * (mu + cov @ xi) for rm, mu, cov in zip(r, means, covariances, strict=True))

    return cgf, grad


def mp_log_bessel_i(nu: float, x: float) -> mpmath.mpf:
    return mpmath.log(mpmath.besseli(nu, x))


def mp_log_vmf_normalizer(dim: int, kappa: float) -> mpmath.mpf:
    """log C_d(κ) = (d/2 − 1) log κ − (d/2) log 2π − log I_{d/2−1}(κ), in high precision."""
    nu = mpmath.mpf(dim) / 2 - 1
    kappa = mpmath.mpf(kappa)
    if kappa == 0:
        return (
            mpmath.loggamma(mpmath.mpf(dim) / 2)
            - mpmath.log(2)
            - (mpmath.mpf(dim) / 2) * mpmath.log(mpmath.pi)
        )
    return (
        nu * mpmath.log(kappa)
        - (mpmath.mpf(dim) / 2) * mpmath.log(2 * mpmath.pi)
        - mp_log_bessel_i(nu, kappa)
    )


def mp_ratio(nu: float, x: float) -> mpmath.mpf:
    return mpmath.besseli(nu + 1, x) / mpmath.besseli(nu, x)


def movmf_cgf(weights, directions, concentrations):
    """κ(η) = log Σ_m π_m C_d(κ_m)/C_d(‖κ_mμ_m + η‖) and gradient, evaluated with mpmath Bessels."""
    dim = directions.shape[1]
    nu = dim / 2.0 - 1.0

    def cgf(eta):
        with mpmath.workdps(40):
            total = mpmath.mpf(0)
            for w, mu, kappa in zip(weights, directions, concentrations, strict=True):
                radius = float(np.linalg.norm(kappa * mu + eta))
                total += w * mpmath.exp(
                    mp_log_vmf_normalizer(dim, kappa) - mp_log_vmf_normalizer(dim, radius)
                )
            return float(mpmath.log(total))

    def grad(eta):
        with mpmath.workdps(40):
            logs, vectors = [], []
            for w, mu, kappa in zip(weights, directions, concentrations, strict=True):
                v = kappa * mu + eta
                radius = float(np.linalg.norm(v))
                logs.append(
                    float(
                        mpmath.log(w)
                        + mp_log_vmf_normalizer(dim, kappa)
                        - mp_log_vmf_normalizer(dim, radius)
                    )
                )
                vectors.append(float(mp_ratio(nu, radius)) * v / radius)
            r = softmax_vector(logs)
            return sum(rm * v for rm, v in zip(r, vectors, strict=True))

    return cgf, grad


def uniform_sphere_cgf_mp(dim: int):
    """CGF of the uniform distribution on S^{d−1} and its gradient, with mpmath Bessels."""
    nu = dim / 2.0 - 1.0

    def cgf(eta):
        r = float(np.linalg.norm(eta))
        with mpmath.workdps(40):
            return float(
                mpmath.loggamma(dim / 2.0) + mp_log_bessel_i(nu, r) - nu * mpmath.log(r / 2.0)
            )

    def grad(eta):
        r = float(np.linalg.norm(eta))
        with mpmath.workdps(40):
            return float(mp_ratio(nu, r)) * eta / r

    return cgf, grad


@functools.cache
def _s2_grid(n_theta: int, n_phi: int) -> tuple[np.ndarray, np.ndarray]:
    t, wt = np.polynomial.legendre.leggauss(n_theta)
    phi = np.linspace(0.0, 2 * np.pi, n_phi, endpoint=False)
    sin = np.sqrt(1 - t**2)
    gamma = np.stack(
        [
            np.outer(sin, np.cos(phi)).ravel(),
            np.outer(sin, np.sin(phi)).ravel(),
            np.repeat(t, n_phi),
        ],
        axis=1,
    )
    weights = np.repeat(wt, n_phi) * (2 * np.pi / n_phi)
    return gamma, weights


def sphere_quadrature_s2(func, n_theta: int = 200, n_phi: int = 200) -> float:
    """∫ func(γ) dσ(γ) over the unit sphere S² (Gauss–Legendre in cos θ, uniform in φ)."""
    gamma, weights = _s2_grid(n_theta, n_phi)
    return float(np.sum(weights * func(gamma)))
