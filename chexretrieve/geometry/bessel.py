"""Modified Bessel functions on the log scale, and the von Mises–Fisher quantities built on them.

Everything spherical in this package (latent spherical model, vMF mixture, the uniform-sphere CGF
used to check Theorem 3) reduces to the modified Bessel function I_ν of the first kind with
ν = d/2 − 1. In d = 512 with arguments near the inverse temperature (100) or a vMF concentration
(up to 1e5), I_ν over- or underflows double precision, so we never form it directly:

* ``log_bessel_i_reduced(nu, x)`` is φ_ν(x) = log I_ν(x) − ν log(x/2). It is finite at x = 0
  (−log Γ(ν+1)), grows like x for large x, and is the only place an "exp(x)" is added back.
  Where the exponentially scaled ``scipy.special.ive`` is a normal float we use
  log(ive) + x − ν log(x/2); where it underflows (x small next to ν) we sum the power series
  Σ_j (x²/4)^j / (j! (ν+1)_j), which converges fast in exactly that region.
* ``bessel_ratio(nu, x)`` is I_{ν+1}(x) / I_ν(x): a ratio of ``ive`` values (the scaling cancels)
  where both are normal floats, otherwise the continued fraction
  I_{ν+1}/I_ν = 1 / (2(ν+1)/x + 1 / (2(ν+2)/x + ...)), evaluated backwards from a fixed depth.
* vMF on S^{d−1}: density C_d(κ) exp(κ μᵀγ) with log C_d(κ) = ν log 2 − φ_ν(κ) − (d/2) log 2π, and
  mean resultant length A_d(κ) = I_{d/2}(κ) / I_{d/2−1}(κ) = ``bessel_ratio(d/2 − 1, κ)``.
* The uniform distribution on S^{d−1} has CGF κ(η) = log Γ(d/2) + φ_ν(‖η‖) and gradient
  A_d(‖η‖) η / ‖η‖ (``uniform_sphere_cgf``).

All functions take and return float64 arrays and broadcast over ``x``.
"""

from __future__ import annotations

import numpy as np
from scipy.special import gammaln, ive

#: ive values below this are treated as underflowed (subnormals lose relative precision)
_SMALLEST_TRUSTED = 1e-280
#: depth of the backward continued fraction; used only where x is small next to ν, where the
#: truncation error is below (x / 2ν)^(2·depth)
_FRACTION_DEPTH = 120
#: cap on power-series terms (the series is only used where it converges in a few dozen)
_SERIES_TERMS = 5000


def _check_order(nu: float) -> float:
    nu = float(nu)
    if not np.isfinite(nu) or nu < -0.5:
        raise ValueError(f"Bessel order {nu} is not supported: the sphere S^(d-1) needs d >= 1")
    return nu


def _check_arguments(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if (x < 0).any() or not np.isfinite(x).all():
        raise ValueError("Bessel arguments must be finite and >= 0 (they are vector lengths)")
    return x


def log_bessel_i_reduced(nu: float, x) -> np.ndarray:
    """φ_ν(x) = log I_ν(x) − ν log(x/2) for x ≥ 0, finite everywhere (φ_ν(0) = −log Γ(ν+1))."""
    nu = _check_order(nu)
    x = _check_arguments(x)
    out = np.empty(x.shape, dtype=np.float64)
    scaled = ive(nu, x)
    trusted = (x > 0) & (scaled > _SMALLEST_TRUSTED) & np.isfinite(scaled)
    xt = x[trusted]
    out[trusted] = np.log(scaled[trusted]) + xt - nu * np.log(xt / 2.0)
    rest = ~trusted
    if rest.any():
        out[rest] = _series_log_reduced(nu, x[rest])
    return out


def _series_log_reduced(nu: float, x: np.ndarray) -> np.ndarray:
    """φ_ν(x) by its power series (used where x is small relative to ν, or x = 0)."""
    quarter_square = (x * x) / 4.0
    total = np.ones_like(x)
    term = np.ones_like(x)
    for j in range(_SERIES_TERMS):
        term = term * quarter_square / ((j + 1.0) * (nu + j + 1.0))
        total += term
        if (term <= 1e-17 * total).all():
            break
    else:  # pragma: no cover - only for orders far beyond any embedding dimension
        raise ValueError(f"Bessel series did not converge for order {nu}; reduce the dimension")
    return np.log(total) - gammaln(nu + 1.0)


def bessel_ratio(nu: float, x) -> np.ndarray:
    """I_{ν+1}(x) / I_ν(x) for x ≥ 0 (0 at x = 0, → 1 as x → ∞), without over- or underflow."""
    nu = _check_order(nu)
    x = _check_arguments(x)
    out = np.zeros(x.shape, dtype=np.float64)
    upper = ive(nu + 1.0, x)
    lower = ive(nu, x)
    trusted = (x > 0) & (upper > _SMALLEST_TRUSTED) & (lower > _SMALLEST_TRUSTED)
    out[trusted] = upper[trusted] / lower[trusted]
    rest = (~trusted) & (x > 0)
    if rest.any():
        xr = x[rest]
        tail = np.zeros_like(xr)
        for j in range(_FRACTION_DEPTH, -1, -1):
            tail = 1.0 / (2.0 * (nu + 1.0 + j) / xr + tail)
        out[rest] = tail
    return out


def vmf_mean_length(dim: int, kappa) -> np.ndarray:
    """A_d(κ) = I_{d/2}(κ) / I_{d/2−1}(κ): E[μᵀγ] under vMF(μ, κ) on S^{d−1}."""
    return bessel_ratio(dim / 2.0 - 1.0, kappa)


def log_vmf_normalizer(dim: int, kappa) -> np.ndarray:
    """log C_d(κ) for the vMF density C_d(κ) exp(κ μᵀγ) on S^{d−1} (κ = 0: the uniform density)."""
    nu = dim / 2.0 - 1.0
    return nu * np.log(2.0) - log_bessel_i_reduced(nu, kappa) - (dim / 2.0) * np.log(2.0 * np.pi)


def uniform_sphere_cgf(eta) -> tuple[np.ndarray, np.ndarray]:
    """CGF and gradient of the uniform distribution on S^{d−1}, for rows η of shape (n, d).

    κ(η) = log E[exp(ηᵀγ)] = log Γ(d/2) + log I_{d/2−1}(‖η‖) − (d/2 − 1) log(‖η‖/2), and
    ∇κ(η) = A_d(‖η‖) η / ‖η‖. This is the population geometry Theorem 3 predicts for anchors drawn
    uniformly: the divergence between two unit λ's is inv_t · A_d(inv_t) · (1 − λ1ᵀλ2).
    """
    eta = np.atleast_2d(np.asarray(eta, dtype=np.float64))
    dim = eta.shape[1]
    nu = dim / 2.0 - 1.0
    radius = np.linalg.norm(eta, axis=1)
    cgf = gammaln(dim / 2.0) + log_bessel_i_reduced(nu, radius)
    safe = np.where(radius > 0, radius, 1.0)
    grad = (bessel_ratio(nu, radius) / safe)[:, None] * eta
    return cgf, grad
