"""Mixture anchor models: Gaussian mixture (GMM) and von Mises–Fisher mixture (moVMF).

Both give a non-quadratic Bregman geometry from a closed-form CGF; features are η = inv_t·λ and
the gradient ∇κ(η) − ∇κ(0), at most 2d + 1 numbers per item (see ``base``).

GMM. q = Σ_m π_m N(μ_m, Σ_m), fitted by EM (scikit-learn; k-means initialisation, Σ_m + 1e-5·I,
tolerance 1e-3 on the mean log-likelihood, at most 200 iterations). Its CGF is
κ(ξ) = log Σ_m π_m exp(μ_mᵀξ + ½ ξᵀΣ_mξ) with gradient Σ_m w_m(ξ)(μ_m + Σ_m ξ), w = softmax of the
same terms. Each Σ_m is stored as floor_m·I + L_m L_mᵀ (floor = smallest eigenvalue, L_m the
directions above it), so the per-item cost grows with the anchors' rank, not with d². When all
components share the floor f (a plain fit: every covariance is a rank ≤ N scatter plus 1e-5·I),
∇κ(η) − ∇κ(0) = f·η + a vector in the span of {μ_m − μ̄, L_m}, of dimension p ≤ N + M, and the
features shrink to d + 2p + 1 numbers (see ``base``); a posterior GMM has per-component floors
and keeps the 2d + 1 layout.
Posterior GMM (Dirichlet–NIW): fit the broad anchors, take each broad component as an NIW prior
(μ0,m = μ_m, Ψ0,m = (ν0 − d − 1) Σ_m, κ0 = 5, ν0 = d + 20), reset the weights to Dir(α = 1), soft-
assign the targets with the broad responsibilities r_im and update every component with
N_m = Σ_i r_im in place of n; π̂_m ∝ α + N_m, Σ̂_m = Ψ'_m/(ν'_m − d − 1). The broad fit is kept
in memory (the last four distinct ones) and reused by later posterior fits on the same corpus.

moVMF. q = Σ_m π_m vMF(μ_m, κ_m) on the sphere. A vMF has CGF log C_d(κ) − log C_d(‖κμ + η‖), so
κ_q(η) = log Σ_m π_m C_d(κ_m)/C_d(‖v_m‖), v_m = κ_m μ_m + η, and
∇κ_q(η) = Σ_m w_m A_d(‖v_m‖) v_m/‖v_m‖, w_m ∝ π_m C_d(κ_m)/C_d(‖v_m‖). Fitted by our own soft EM on
the sphere (k-means initialisation): responsibilities from log π_m + log C_d(κ_m) + κ_m μ_mᵀγ;
μ_m = the normalised weighted resultant, κ_m = r̄(d − r̄²)/(1 − r̄²) with r̄ its mean length. κ is
capped at ``max_concentration`` (default 1e5, variance ≈ 1/κ per direction: the vMF counterpart of
the GMM's 1e-5 covariance floor), which keeps single-anchor components finite. Components whose
total responsibility falls below 1e-10·N are dropped.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np
from scipy.special import logsumexp

from chexretrieve.geometry.base import BregmanGeometry
from chexretrieve.geometry.bessel import (
    bessel_ratio,
    log_bessel_i_reduced,
    log_vmf_normalizer,
    vmf_mean_length,
)
from chexretrieve.geometry.checks import (
    check_positive_float,
    check_positive_int,
    numerical_rank,
)
from chexretrieve.geometry.gaussian import check_nu0, descending_eigh, mean_and_scatter, niw_update

#: broad-prior EM fits kept for reuse: fitting the same broad corpus again for every finding's
#: posterior GMM gives the same mixture (EM is deterministic for the seed), so it is done once
_BROAD_FITS: OrderedDict[tuple, object] = OrderedDict()
_BROAD_FITS_LOCK = threading.Lock()
_BROAD_FITS_KEPT = 4


def _fit_mixture(points: np.ndarray, remember: bool, **settings):
    """scikit-learn's full-covariance GaussianMixture fitted to ``points``; with ``remember`` an
    identical earlier fit (same bytes, same settings) is returned instead of fitting again."""
    from sklearn.mixture import GaussianMixture  # imported here: heavy, and only for fitting

    key = None
    if remember:
        digest = hashlib.sha256(np.ascontiguousarray(points).tobytes()).hexdigest()
        key = (digest, points.shape, tuple(sorted(settings.items())))
        with _BROAD_FITS_LOCK:
            if key in _BROAD_FITS:
                _BROAD_FITS.move_to_end(key)
                return _BROAD_FITS[key]
    mixture = GaussianMixture(covariance_type="full", init_params="kmeans", **settings).fit(points)
    if key is not None:
        with _BROAD_FITS_LOCK:
            _BROAD_FITS[key] = mixture
            while len(_BROAD_FITS) > _BROAD_FITS_KEPT:
                _BROAD_FITS.popitem(last=False)
    return mixture


def _check_components(n_components, available: int, what: str) -> int:
    n_components = check_positive_int(n_components, "n_components")
    if n_components > available:
        raise ValueError(
            f"n_components={n_components} exceeds the number of {what} ({available}); pass "
            f"n_components <= {available} or more anchors"
        )
    return n_components


def _distinct_count(points: np.ndarray) -> int:
    return len(np.unique(np.round(points, 12), axis=0))


class GaussianMixtureGeometry(BregmanGeometry):
    """Bregman divergence of the GMM anchor model's CGF."""

    kind = "gmm"

    def __init__(
        self,
        anchors: np.ndarray,
        inv_temperature: float,
        prior: np.ndarray | None = None,
        n_components: int = 4,
        seed: int = 0,
        reg_covar: float = 1e-5,
        tol: float = 1e-3,
        max_iter: int = 200,
        dirichlet_alpha: float = 1.0,
        kappa0: float = 5.0,
        nu0: float | None = None,
        target_weight: float = 1.0,
    ):
        anchors = anchors.astype(np.float64)
        super().__init__(anchors.shape[1], inv_temperature, anchors)
        fit_on = anchors if prior is None else prior.astype(np.float64)
        what = "anchors" if prior is None else "broad (prior) anchors"
        n_components = _check_components(n_components, _distinct_count(fit_on), f"distinct {what}")
        mixture = _fit_mixture(
            fit_on,
            remember=prior is not None,
            n_components=n_components,
            reg_covar=check_positive_float(reg_covar, "reg_covar", allow_zero=True),
            tol=check_positive_float(tol, "tol"),
            max_iter=check_positive_int(max_iter, "max_iter"),
            random_state=int(seed),
        )
        #: EM diagnostics of the (broad) fit
        self.converged, self.n_iter = bool(mixture.converged_), int(mixture.n_iter_)
        if prior is None:
            weights, means, covariances = (
                mixture.weights_,
                mixture.means_,
                mixture.covariances_,
            )
        else:
            weights, means, covariances = self._dirichlet_niw(
                mixture, anchors, dirichlet_alpha, kappa0, nu0, target_weight
            )
        #: mixture weights (M,), means (M, d), covariances (M, d, d) of the (posterior) model
        self.weights, self.means, self.covariances = weights, means, covariances
        self._factorise()

    def _dirichlet_niw(self, mixture, targets, alpha, kappa0, nu0, weight):
        alpha = check_positive_float(alpha, "dirichlet_alpha")
        kappa0 = check_positive_float(kappa0, "kappa0")
        nu0 = check_nu0(nu0, self.dim)
        weight = check_positive_float(weight, "target_weight", allow_zero=True)
        responsibilities = mixture.predict_proba(targets)
        counts = weight * responsibilities.sum(axis=0)
        means = np.empty_like(mixture.means_)
        covariances = np.empty_like(mixture.covariances_)
        for m in range(len(counts)):
            mean, scatter, total = mean_and_scatter(targets, responsibilities[:, m])
            if total <= 0:
                mean = mixture.means_[m]
            means[m], covariances[m] = niw_update(
                mixture.means_[m],
                mixture.covariances_[m],
                counts[m],
                mean,
                weight * scatter,
                kappa0,
                nu0,
            )
        return (alpha + counts) / (alpha + counts).sum(), means, covariances

    def _factorise(self) -> None:
        floors, factors, owner = [], [], []
        largest = max(float(np.linalg.eigvalsh(c).max()) for c in self.covariances)
        cutoff = largest * self.dim * np.finfo(np.float64).eps * 10
        for m, covariance in enumerate(self.covariances):
            values, vectors = descending_eigh(covariance)
            floor = max(float(values[-1]), 0.0)
            excess = values - floor
            keep = excess > cutoff
            floors.append(floor)
            factors.append(vectors[:, keep] * np.sqrt(excess[keep]))
            owner += [m] * int(keep.sum())
        #: smallest eigenvalue of each covariance (the isotropic part)
        self.floors = np.array(floors)
        #: (d, R) stacked low-rank parts; column j belongs to component owner[j]
        self.factors = np.hstack(factors) if owner else np.zeros((self.dim, 0))
        self._owner = np.zeros((len(owner), len(floors)))
        self._owner[np.arange(len(owner)), owner] = 1.0
        self.mean_anchor = self.weights @ self.means
        self.basis = np.eye(self.dim)
        self._reduced = False
        if self.floors.max() - self.floors.min() <= cutoff:
            # shared floor f: ∇κ − ∇κ(0) = f·η + (a part in span{μ_m − μ̄, L_m}); use that span
            span = np.vstack([self.means - self.mean_anchor, self.factors.T])
            _, singular, rows = np.linalg.svd(span, full_matrices=False)
            rank = numerical_rank(singular, max(span.shape))
            floor = float(self.floors.mean())
            if 2 * rank + 1 + (self.dim if floor > 0 else 0) < 2 * self.dim + 1:
                self._reduced = True
                self.isotropic = floor
                self.basis = rows[:rank].T.copy()
                self._reduced_means = (self.means - self.mean_anchor) @ self.basis
                self._reduced_factors = self.basis.T @ self.factors

    def _potential(self, x: np.ndarray):
        xi = self.inv_temperature * x.astype(np.float64)
        sq_norm = np.einsum("ij,ij->i", xi, xi)
        if self._reduced:
            # everything in span coordinates: μ_mᵀξ = μ̄ᵀξ + (μ_m − μ̄)ᵀQ e, L_mᵀξ = (QᵀL_m)ᵀ e
            e = xi @ self.basis
            projected = e @ self._reduced_factors
            quadratic = sq_norm[:, None] * self.floors + (projected * projected) @ self._owner
            logits = np.log(self.weights) + e @ self._reduced_means.T + 0.5 * quadratic
            cgf = logsumexp(logits, axis=1)
            w = np.exp(logits - cgf[:, None])
            gradient = w @ self._reduced_means
            gradient += (projected * (w @ self._owner.T)) @ self._reduced_factors.T
            return cgf, e, gradient
        projected = xi @ self.factors
        quadratic = sq_norm[:, None] * self.floors + (projected * projected) @ self._owner
        logits = np.log(self.weights) + xi @ self.means.T + 0.5 * quadratic
        cgf = logsumexp(logits, axis=1)
        w = np.exp(logits - cgf[:, None])
        gradient = w @ self.means + (w @ self.floors)[:, None] * xi
        gradient += (projected * (w @ self._owner.T)) @ self.factors.T
        cgf -= xi @ self.mean_anchor
        gradient -= self.mean_anchor
        return cgf, xi, gradient


def fit_movmf(anchors, n_components, seed=0, tol=1e-3, max_iter=200, max_concentration=1e5):
    """Soft-moVMF EM on unit rows.

    Returns (weights, mean directions, concentrations, iterations run, converged).
    """
    from sklearn.cluster import KMeans  # imported here: heavy, and only for fitting

    count, dim = anchors.shape
    labels = KMeans(n_clusters=n_components, n_init=1, random_state=int(seed)).fit(anchors).labels_
    responsibilities = np.zeros((count, n_components))
    responsibilities[np.arange(count), labels] = 1.0
    previous = -np.inf
    converged = False
    iteration = 0
    while iteration < max_iter:
        iteration += 1
        totals = responsibilities.sum(axis=0)
        alive = totals > 1e-10 * count
        responsibilities, totals = responsibilities[:, alive], totals[alive]
        weights = totals / totals.sum()
        resultants = responsibilities.T @ anchors
        lengths = np.linalg.norm(resultants, axis=1)
        directions = np.where(
            lengths[:, None] > 0,
            resultants / np.where(lengths > 0, lengths, 1.0)[:, None],
            anchors[np.argmax(responsibilities, axis=0)],
        )
        mean_length = np.clip(lengths / totals, 0.0, 1.0)
        denominator = np.maximum(1.0 - mean_length**2, 1e-300)
        concentrations = np.minimum(
            mean_length * (dim - mean_length**2) / denominator, max_concentration
        )
        log_joint = (
            np.log(weights)
            + log_vmf_normalizer(dim, concentrations)
            + concentrations * (anchors @ directions.T)
        )
        log_likelihood = logsumexp(log_joint, axis=1)
        responsibilities = np.exp(log_joint - log_likelihood[:, None])
        mean_log_likelihood = float(log_likelihood.mean())
        if mean_log_likelihood - previous < tol:
            converged = True
            break
        previous = mean_log_likelihood
    return weights, directions, concentrations, iteration, converged


class VonMisesFisherMixtureGeometry(BregmanGeometry):
    """Bregman divergence of the moVMF anchor model's CGF (all anchor mass on the sphere)."""

    kind = "movmf"

    def __init__(
        self,
        anchors: np.ndarray,
        inv_temperature: float,
        n_components: int = 4,
        seed: int = 0,
        tol: float = 1e-3,
        max_iter: int = 200,
        max_concentration: float = 1e5,
    ):
        anchors = anchors.astype(np.float64)
        super().__init__(anchors.shape[1], inv_temperature, anchors)
        if self.dim < 2:
            raise ValueError("the vMF mixture needs embeddings of dimension >= 2")
        n_components = _check_components(n_components, _distinct_count(anchors), "distinct anchors")
        fitted = fit_movmf(
            anchors,
            n_components,
            seed,
            check_positive_float(tol, "tol"),
            check_positive_int(max_iter, "max_iter"),
            check_positive_float(max_concentration, "max_concentration"),
        )
        #: mixture weights (M,), unit mean directions (M, d), concentrations (M,)
        self.weights, self.directions, self.concentrations = fitted[:3]
        self.n_iter, self.converged = fitted[3], fitted[4]
        self._order = self.dim / 2.0 - 1.0
        self._log_reduced_kappa = log_bessel_i_reduced(self._order, self.concentrations)
        lengths = vmf_mean_length(self.dim, self.concentrations)
        self.mean_anchor = (self.weights * lengths) @ self.directions
        self.basis = np.eye(self.dim)

    def _potential(self, x: np.ndarray):
        eta = self.inv_temperature * x.astype(np.float64)
        kappa = self.concentrations
        dots = eta @ self.directions.T
        sq_norm = np.einsum("ij,ij->i", eta, eta)
        radius = np.sqrt(np.maximum(kappa**2 + 2.0 * kappa * dots + sq_norm[:, None], 0.0))
        flat = radius.ravel()
        logits = (
            np.log(self.weights)
            + log_bessel_i_reduced(self._order, flat).reshape(radius.shape)
            - self._log_reduced_kappa
        )
        cgf = logsumexp(logits, axis=1)
        w = np.exp(logits - cgf[:, None])
        ratio = bessel_ratio(self._order, flat).reshape(radius.shape)
        safe = np.where(radius > 1e-12, radius, 1.0)
        per_length = np.where(radius > 1e-12, ratio / safe, 1.0 / self.dim)
        coefficient = w * per_length
        gradient = (coefficient * kappa) @ self.directions + coefficient.sum(axis=1)[:, None] * eta
        cgf -= eta @ self.mean_anchor
        gradient -= self.mean_anchor
        return cgf, eta, gradient
