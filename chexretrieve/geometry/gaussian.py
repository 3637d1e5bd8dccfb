"""Gaussian and latent (subspace) anchor models, with their posterior ("adapted") versions.

Gaussian. Fit N(μ, Σ) to the anchors (sample mean, covariance with 1/N). Its CGF is
μᵀη + ½ ηᵀΣη, so the anchor divergence is the quadratic form
d(λ1 ‖ λ2) = (inv_t²/2) (λ1 − λ2)ᵀ Σ (λ1 − λ2). With Σ = V diag(s) Vᵀ and z = inv_t·diag(√s)Vᵀλ
(only the r non-zero eigenvalues, r ≤ N − 1), the divergence is ½‖z1 − z2‖².

Latent Gaussian. Keep only the subspace: U = the top-k eigenvectors of the anchor covariance
(k explains 95% of its trace unless given); d = (inv_t²/2) ‖Uᵀ(λ1 − λ2)‖², i.e. z = inv_t·Uᵀλ.

Latent spherical. Project, then renormalise: the anchors are modelled as uniform on the unit sphere
of the subspace, whose CGF has a radial gradient A_k(r) η/r. Both images then have the same
|η| = inv_t, and the divergence is inv_t·A_k(inv_t)·(1 − cos(Uᵀλ1, Uᵀλ2)) with
A_k(r) = I_{k/2}(r) / I_{k/2−1}(r); i.e. z = √(inv_t·A_k(inv_t)) · Uᵀλ/‖Uᵀλ‖.

Posterior models (a broad ``prior`` anchor set plus a few target anchors):

* Gaussian: Normal–Inverse-Wishart prior from the broad fit: μ0 = broad mean,
  Ψ0 = (ν0 − d − 1) Σ_broad, κ0 = 5, ν0 = d + 20. With n targets of mean γ̄ and scatter S:
  μn = (κ0 μ0 + n γ̄)/(κ0 + n), Ψn = Ψ0 + S + κ0 n/(κ0 + n) (γ̄ − μ0)(γ̄ − μ0)ᵀ, and the geometry
  uses the posterior mean Σ̂ = Ψn/(ν0 + n − d − 1).
* Latent models: matrix Bingham on the subspace. A = α U_broad U_broadᵀ (α = 50), updated to
  A_post = A + β Cov(targets); U_post = top-k eigenvectors of A_post. For the latent Gaussian
  β = (n/2)(1/ε − 1/(1 + ε)), ε = 1e-8 (the ambient surrogate's isotropic variance); for the latent
  spherical model β is a free strength and defaults to the same value. k defaults to the
  95%-variance rule on A_post (the smallest k whose top eigenvalues hold ``explained_variance`` of
  its trace), and U_broad to the same rule on the broad covariance. (The paper's k = 128 equals
  d for a 128-d encoder, where the model ranks exactly as cosine; an integer k is still accepted.)
* A latent model with k = d ranks exactly as cosine (UUᵀ = I), by construction: it is refused
  with :class:`~chexretrieve.geometry.checks.CosineEquivalentGeometryError`.
* ``target_weight`` w scales the targets' evidence (n → w·n, S → w·S): w → 0 recovers the prior fit,
  large w the target-only fit.
"""

from __future__ import annotations

import numpy as np

from chexretrieve.geometry.base import QuadraticGeometry
from chexretrieve.geometry.bessel import bessel_ratio
from chexretrieve.geometry.checks import (
    CosineEquivalentGeometryError,
    check_positive_float,
    check_positive_int,
    numerical_rank,
)


def mean_and_scatter(points: np.ndarray, weights: np.ndarray | None = None):
    """(Weighted) mean, scatter Σ r_i (γ_i − γ̄)(γ_i − γ̄)ᵀ and total weight of the rows."""
    if weights is None:
        weights = np.ones(len(points))
    total = float(weights.sum())
    if total <= 0:
        return np.zeros(points.shape[1]), np.zeros((points.shape[1],) * 2), 0.0
    mean = weights @ points / total
    centred = points - mean
    return mean, (centred * weights[:, None]).T @ centred, total


def descending_eigh(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Eigenvalues (descending) and eigenvectors (columns) of a symmetric matrix."""
    values, vectors = np.linalg.eigh((matrix + matrix.T) / 2.0)
    return values[::-1], vectors[:, ::-1]


def spectrum(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Descending eigenvalues, eigenvectors and numerical rank of a symmetric PSD matrix."""
    values, vectors = descending_eigh(matrix)
    return values, vectors, numerical_rank(np.clip(values, 0, None), len(matrix))


def niw_update(mu0, sigma0, count, mean, scatter, kappa0, nu0):
    """Normal–Inverse-Wishart update; returns the posterior mean of μ and of Σ.

    Prior from a broad fit (μ0, Σ0): Ψ0 = (ν0 − d − 1) Σ0. ``count`` targets (possibly fractional:
    responsibilities times a weight) with mean ``mean`` and scatter ``scatter``.
    """
    dim = len(mu0)
    kappa_n = kappa0 + count
    nu_n = nu0 + count
    mu_n = (kappa0 * mu0 + count * mean) / kappa_n
    diff = mean - mu0
    psi_n = (nu0 - dim - 1) * sigma0 + scatter + (kappa0 * count / kappa_n) * np.outer(diff, diff)
    return mu_n, psi_n / (nu_n - dim - 1)


def check_nu0(nu0, dim: int) -> float:
    nu0 = float(dim + 20) if nu0 is None else check_positive_float(nu0, "nu0")
    if nu0 <= dim + 1:
        raise ValueError(
            f"nu0 must exceed d + 1 = {dim + 1} for the posterior mean of Σ to exist, got {nu0}; "
            "the default is d + 20"
        )
    return nu0


def _check_fraction(explained_variance) -> float:
    explained_variance = check_positive_float(explained_variance, "explained_variance")
    if explained_variance > 1:
        raise ValueError(f"explained_variance is a fraction in (0, 1], got {explained_variance}")
    return explained_variance


def _need_distinct(anchors: np.ndarray, what: str) -> None:
    if len(anchors) < 2:
        raise ValueError(
            f"the {what} model needs at least 2 distinct anchors to estimate a covariance, got "
            f"{len(anchors)}"
        )


class GaussianGeometry(QuadraticGeometry):
    """(inv_t²/2)(λ1 − λ2)ᵀ Σ (λ1 − λ2) for the (posterior) anchor covariance Σ."""

    kind = "gaussian"

    def __init__(
        self,
        anchors: np.ndarray,
        inv_temperature: float,
        prior: np.ndarray | None = None,
        kappa0: float = 5.0,
        nu0: float | None = None,
        target_weight: float = 1.0,
    ):
        anchors = anchors.astype(np.float64)
        super().__init__(anchors.shape[1], inv_temperature, anchors)
        if prior is None:
            _need_distinct(anchors, "gaussian")
            mean, scatter, count = mean_and_scatter(anchors)
            #: fitted (posterior mean) anchor mean and covariance
            self.mean, self.covariance = mean, scatter / count
        else:
            prior = prior.astype(np.float64)
            _need_distinct(prior, "broad (prior) gaussian")
            weight = check_positive_float(target_weight, "target_weight", allow_zero=True)
            mu0, broad_scatter, broad_count = mean_and_scatter(prior)
            mean, scatter, count = mean_and_scatter(anchors)
            self.mean, self.covariance = niw_update(
                mu0,
                broad_scatter / broad_count,
                weight * count,
                mean,
                weight * scatter,
                check_positive_float(kappa0, "kappa0"),
                check_nu0(nu0, self.dim),
            )
        values, vectors, rank = spectrum(self.covariance)
        if rank == 0:
            raise ValueError("the anchor covariance is zero (all anchors identical); add anchors")
        #: (d, r) factor with factor @ factor.T = covariance (non-zero eigenvalues only)
        self.factor = vectors[:, :rank] * np.sqrt(values[:rank])

    @property
    def embed_dim(self) -> int:
        return self.factor.shape[1]

    def _embed(self, x: np.ndarray) -> np.ndarray:
        return self.inv_temperature * (x @ self._cast("factor", x.dtype))


class LatentGeometry(QuadraticGeometry):
    """Shared fitting of the subspace U for the latent Gaussian and latent spherical models."""

    def __init__(
        self,
        anchors: np.ndarray,
        inv_temperature: float,
        prior: np.ndarray | None = None,
        k: int | str | None = None,
        explained_variance: float = 0.95,
        alpha: float = 50.0,
        epsilon: float = 1e-8,
        beta: float | None = None,
        target_weight: float = 1.0,
    ):
        anchors = anchors.astype(np.float64)
        super().__init__(anchors.shape[1], inv_temperature, anchors)
        #: k = None or "variance" (the default): choose k by the explained_variance rule on the
        #: matrix that defines the subspace (the anchor covariance, or the posterior Bingham matrix
        #: with a prior; then the prior's directions U_broad by the same rule on the broad
        #: covariance); an integer k is used as given
        given = k not in (None, "variance")
        k = check_positive_int(k, "k") if given else None
        if prior is None:
            self.basis = self._fit_subspace(anchors, k, explained_variance)
        else:
            self.basis = self._fit_posterior_subspace(
                anchors,
                prior.astype(np.float64),
                k,
                alpha,
                epsilon,
                beta,
                target_weight,
                explained_variance,
            )
        #: latent dimension
        self.k = self.basis.shape[1]
        if self.k >= self.dim:
            how = "as given" if given else "from the 95%-variance rule"
            posterior = "posterior " if prior is not None else ""
            raise CosineEquivalentGeometryError(posterior + self.kind, self.k, self.dim, how)

    def _fit_subspace(self, anchors, k, explained_variance) -> np.ndarray:
        _need_distinct(anchors, self.kind)
        explained_variance = _check_fraction(explained_variance)
        _, scatter, count = mean_and_scatter(anchors)
        values, vectors, rank = spectrum(scatter / count)
        if rank == 0:
            raise ValueError("the anchor covariance is zero (all anchors identical); add anchors")
        if k is None:
            share = np.cumsum(values[:rank]) / values[:rank].sum()
            k = int(np.searchsorted(share, explained_variance - 1e-12) + 1)
        elif k > rank:
            raise ValueError(
                f"k={k} exceeds the rank {rank} of the anchor covariance ({len(anchors)} anchors); "
                f"pass k <= {rank} or use more anchors"
            )
        #: fraction of the anchor covariance's trace the subspace explains
        self.explained = float(values[:k].sum() / values[:rank].sum())
        return vectors[:, :k].copy()

    def _fit_posterior_subspace(
        self, targets, prior, k, alpha, epsilon, beta, weight, explained_variance
    ):
        _need_distinct(prior, f"broad (prior) {self.kind}")
        alpha = check_positive_float(alpha, "alpha")
        epsilon = check_positive_float(epsilon, "epsilon")
        weight = check_positive_float(weight, "target_weight", allow_zero=True)
        _, broad_scatter, broad_count = mean_and_scatter(prior)
        values, vectors, broad_rank = spectrum(broad_scatter / broad_count)
        if broad_rank == 0:
            raise ValueError("the broad (prior) anchors are all identical; pass a broad anchor set")
        explained_variance = _check_fraction(explained_variance)
        by_variance = k is None
        if not by_variance:
            broad_k = min(k, broad_rank)
        else:  # the prior's directions by the same rule
            broad_share = np.cumsum(values[:broad_rank]) / values[:broad_rank].sum()
            broad_k = int(np.searchsorted(broad_share, explained_variance - 1e-12) + 1)
        broad_basis = vectors[:, :broad_k]
        _, target_scatter, count = mean_and_scatter(targets)
        if beta is None:
            beta = (weight * count / 2.0) * (1.0 / epsilon - 1.0 / (1.0 + epsilon))
        else:
            beta = weight * check_positive_float(beta, "beta", allow_zero=True)
        #: strength of the target covariance in the Bingham update
        self.beta = beta
        a_post = alpha * broad_basis @ broad_basis.T + beta * (target_scatter / count)
        post_values, post_vectors, post_rank = spectrum(a_post)
        if by_variance:
            share = np.cumsum(post_values[:post_rank]) / post_values[:post_rank].sum()
            k = int(np.searchsorted(share, explained_variance - 1e-12) + 1)
        if k > post_rank:
            raise ValueError(
                f"k={k} exceeds the rank {post_rank} of the posterior Bingham matrix (broad rank "
                f"{broad_rank} plus the targets); pass k <= {post_rank} or more broad anchors"
            )
        self.explained = float(post_values[:k].sum() / post_values[:post_rank].sum())
        return post_vectors[:, :k].copy()

    @property
    def embed_dim(self) -> int:
        return self.k


class LatentGaussianGeometry(LatentGeometry):
    """(inv_t²/2) ‖Uᵀ(λ1 − λ2)‖²."""

    kind = "latent_gaussian"

    def _embed(self, x: np.ndarray) -> np.ndarray:
        return self.inv_temperature * (x @ self._cast("basis", x.dtype))


class LatentSphericalGeometry(LatentGeometry):
    """inv_t·A_k(inv_t)·(1 − cos(Uᵀλ1, Uᵀλ2))."""

    kind = "latent_spherical"

    @property
    def scale(self) -> float:
        """inv_t · A_k(inv_t); the divergence of opposite projected directions is twice this."""
        ratio = bessel_ratio(self.k / 2.0 - 1.0, np.array([self.inv_temperature]))[0]
        return self.inv_temperature * float(ratio)

    def _embed(self, x: np.ndarray) -> np.ndarray:
        projected = x @ self._cast("basis", x.dtype)
        norms = np.linalg.norm(projected, axis=1)
        tiny = norms <= 1e-6
        if tiny.any():
            raise ValueError(
                f"image row {int(np.flatnonzero(tiny)[0])} is orthogonal to the latent subspace "
                "(projection norm <= 1e-6), so it has no direction there; use latent_gaussian or "
                "a larger k"
            )
        return (np.sqrt(self.scale) / norms)[:, None].astype(x.dtype) * projected
