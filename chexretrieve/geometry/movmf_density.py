"""A density model of the embedding space itself: a mixture of von Mises–Fisher distributions.

Not an anchor geometry: this models where *image* embeddings lie on the unit sphere S^{d−1}, to say
how typical a query is of an archive (out-of-distribution flag), how rare an archive image is, and
what it is made of (its posterior over the mixture's components).

Model. p(x) = Σ_k π_k C_d(κ_k) exp(κ_k μ_kᵀx) for unit x, a density with respect to the surface
measure of S^{d−1}, with the exact log-normaliser log C_d(κ) = ν log 2 − φ_ν(κ) − (d/2) log 2π,
ν = d/2 − 1 (:func:`chexretrieve.geometry.bessel.log_vmf_normalizer`, no asymptotic shortcut).

Fitting: soft EM on the sphere (Banerjee et al. 2005).
* Initialisation: spherical k-means++ seeding and a few spherical k-means (cosine) passes, all from
  ``numpy.random.default_rng(seed)``, so a fit is a pure function of (data, settings, seed).
* E-step: responsibilities r_ik ∝ π_k C_d(κ_k) exp(κ_k μ_kᵀx_i).
* M-step: π_k = N_k/n, μ_k = the normalised resultant Σ_i r_ik x_i, and κ_k the exact maximiser of
  N_k(log C_d(κ) + κ r̄_k), i.e. the root of A_d(κ) = r̄_k with A_d(κ) = I_{d/2}(κ)/I_{d/2−1}(κ),
  r̄_k = ‖Σ_i r_ik x_i‖/N_k: Banerjee's approximation κ ≈ r̄(d − r̄²)/(1 − r̄²) as the start, then
  Newton steps with A_d'(κ) = 1 − A_d(κ)² − (d − 1) A_d(κ)/κ until |A_d(κ) − r̄| < 1e-10.
  κ is capped at ``max_concentration``: the objective is concave in κ, so the capped value is the
  constrained maximiser and EM's log-likelihood stays monotone. Components whose total
  responsibility falls below 1e-10·n are dropped (they carry no data).
* Stop when the mean log-likelihood gains less than ``tol`` in one iteration, or at ``max_iter``.
The component count is chosen among candidates by BIC (free parameters (K − 1) + K(d − 1) + K) or
by the mean log-likelihood of a held-out split (:func:`select_movmf_density`).

Evaluation is two small matrix products: x μᵀ (d × K) and a logsumexp over K, well under a
millisecond per query at K = 64, d = 512.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from chexretrieve.geometry.bessel import log_vmf_normalizer, vmf_mean_length
from chexretrieve.geometry.checks import check_positive_float, check_positive_int, check_unit_rows

#: Newton refinement of κ stops when |A_d(κ) − r̄| falls below this, or after _NEWTON_STEPS steps
_NEWTON_TOLERANCE = 1e-10
_NEWTON_STEPS = 50
#: components with total responsibility below this fraction of n are dropped
_DEAD_FRACTION = 1e-10
#: spherical k-means passes after the k-means++ seeding
_KMEANS_PASSES = 10
#: criteria accepted by select_movmf_density
SELECTION_CRITERIA = ("bic", "heldout")


def logsumexp_rows(values: np.ndarray) -> np.ndarray:
    """log Σ_k exp(values[i, k]) per row, stably (scipy's logsumexp costs ~170 µs per call on one
    row; this ~10 µs, which is most of a query's cost)."""
    top = values.max(axis=1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    return (top + np.log(np.exp(values - top).sum(axis=1, keepdims=True)))[:, 0]


def banerjee_concentration(dim: int, mean_length) -> np.ndarray:
    """Banerjee et al.'s approximation κ ≈ r̄(d − r̄²)/(1 − r̄²) of the root of A_d(κ) = r̄."""
    r = np.clip(np.asarray(mean_length, dtype=np.float64), 0.0, 1.0 - 1e-15)
    return r * (dim - r * r) / (1.0 - r * r)


def solve_concentration(dim: int, mean_length, max_concentration: float = 1e5) -> np.ndarray:
    """The κ ≥ 0 with A_d(κ) = r̄ (vectorised over r̄), capped at ``max_concentration``.

    Starts at Banerjee's approximation and refines by Newton's method. A_d is increasing and
    concave on κ > 0, so a step from the right of the root lands left of it and the steps then
    increase monotonically to the root; a step is never allowed below a tenth of the current κ.
    """
    target = np.clip(np.asarray(mean_length, dtype=np.float64), 0.0, 1.0)
    kappa = np.minimum(banerjee_concentration(dim, target), max_concentration)
    active = (target > 0) & (kappa < max_concentration)
    for _ in range(_NEWTON_STEPS):
        if not active.any():
            break
        k = kappa[active]
        a = vmf_mean_length(dim, k)
        residual = a - target[active]
        slope = 1.0 - a * a - (dim - 1.0) * a / np.maximum(k, 1e-300)
        slope = np.where(slope > 0, slope, 1.0 / dim)  # A_d'(0) = 1/d; guards rounding near 0
        step = np.maximum(k - residual / slope, k / 10.0)
        kappa[active] = np.minimum(step, max_concentration)
        still = np.abs(residual) >= _NEWTON_TOLERANCE
        index = np.flatnonzero(active)
        active[index[~still]] = False
        active &= kappa < max_concentration
    kappa[target <= 0] = 0.0
    return kappa


@dataclass(frozen=True)
class MovMFDensity:
    """A fitted vMF mixture density on S^{d−1}: weights (K,), unit directions (K, d), κ (K,)."""

    weights: np.ndarray
    directions: np.ndarray
    concentrations: np.ndarray
    #: mean log-likelihood after each EM iteration (non-decreasing); empty for a loaded model
    history: tuple[float, ...] = ()
    converged: bool = True
    _log_prior: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        weights = np.asarray(self.weights, dtype=np.float64)
        directions = np.asarray(self.directions, dtype=np.float64)
        kappa = np.asarray(self.concentrations, dtype=np.float64)
        shape = (directions.shape[0],) if directions.ndim == 2 else None
        if shape is None or weights.shape != shape or kappa.shape != shape:
            raise ValueError(
                f"inconsistent mixture shapes: weights {weights.shape}, directions "
                f"{directions.shape}, concentrations {kappa.shape}"
            )
        if (weights <= 0).any() or abs(weights.sum() - 1.0) > 1e-8 or (kappa < 0).any():
            raise ValueError("mixture weights must be positive and sum to 1, and every κ >= 0")
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "directions", directions)
        object.__setattr__(self, "concentrations", kappa)
        log_prior = np.log(weights) + log_vmf_normalizer(directions.shape[1], kappa)
        object.__setattr__(self, "_log_prior", log_prior)

    @property
    def dim(self) -> int:
        return int(self.directions.shape[1])

    @property
    def n_components(self) -> int:
        return int(self.directions.shape[0])

    @property
    def n_parameters(self) -> int:
        """Free parameters: K − 1 weights, K(d − 1) directions, K concentrations."""
        k, d = self.n_components, self.dim
        return (k - 1) + k * (d - 1) + k

    def _log_joint(self, x: np.ndarray) -> np.ndarray:
        dots = (x @ self.directions.T.astype(x.dtype, copy=False)).astype(np.float64)
        return self._log_prior + dots * self.concentrations

    def log_density(self, embeddings) -> np.ndarray:
        """log p(x) for unit rows (n, d), in nats, w.r.t. the sphere's surface measure."""
        x = check_unit_rows(embeddings, "embeddings", self.dim)
        return logsumexp_rows(self._log_joint(x))

    def log_density_and_posterior(self, embeddings) -> tuple[np.ndarray, np.ndarray]:
        """Both at the cost of one: log p(x) (n,) and P(k | x) (n, K)."""
        x = check_unit_rows(embeddings, "embeddings", self.dim)
        joint = self._log_joint(x)
        total = logsumexp_rows(joint)
        return total, np.exp(joint - total[:, None])

    def posterior(self, embeddings) -> np.ndarray:
        """Responsibilities P(component k | x), shape (n, K), rows summing to 1."""
        x = check_unit_rows(embeddings, "embeddings", self.dim)
        joint = self._log_joint(x)
        return np.exp(joint - logsumexp_rows(joint)[:, None])

    def bic(self, embeddings) -> float:
        """−2 log L + p log n on ``embeddings`` (lower is better)."""
        count = np.asarray(embeddings).shape[0]
        total = float(self.log_density(embeddings).sum())
        return -2.0 * total + self.n_parameters * np.log(count)

    def to_arrays(self) -> dict[str, np.ndarray]:
        """The parameters as plain arrays (``np.savez``-ready); :meth:`from_arrays` inverts it."""
        return {
            "weights": self.weights,
            "directions": self.directions,
            "concentrations": self.concentrations,
        }

    @classmethod
    def from_arrays(cls, arrays) -> MovMFDensity:
        return cls(
            np.asarray(arrays["weights"]),
            np.asarray(arrays["directions"]),
            np.asarray(arrays["concentrations"]),
        )


def spherical_kmeans_labels(x: np.ndarray, n_components: int, seed: int) -> np.ndarray:
    """Hard labels from k-means++ seeding (distance 1 − cos) and a few spherical k-means passes."""
    rng = np.random.default_rng(seed)
    count = x.shape[0]
    centres = np.empty((n_components, x.shape[1]), dtype=np.float64)
    centres[0] = x[rng.integers(count)]
    distance = np.maximum(1.0 - x @ centres[0].astype(x.dtype), 0.0).astype(np.float64)
    for k in range(1, n_components):
        total = distance.sum()
        if total <= 0:  # fewer distinct points than components: repeat a point (dropped later)
            pick = int(rng.integers(count))
        else:
            pick = int(rng.choice(count, p=distance / total))
        centres[k] = x[pick]
        distance = np.minimum(distance, np.maximum(1.0 - x @ centres[k].astype(x.dtype), 0.0))
    labels = np.argmax(x @ centres.T.astype(x.dtype), axis=1)
    for _ in range(_KMEANS_PASSES):
        onehot = np.zeros((count, n_components), dtype=x.dtype)
        onehot[np.arange(count), labels] = 1.0
        sums = (onehot.T @ x).astype(np.float64)  # per-cluster sums (np.add.at is far slower)
        norms = np.linalg.norm(sums, axis=1)
        keep = norms > 0
        centres[keep] = sums[keep] / norms[keep, None]
        new = np.argmax(x @ centres.T.astype(x.dtype), axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels


def _m_step(x, responsibilities, max_concentration):
    count, dim = x.shape
    totals = responsibilities.sum(axis=0)
    alive = totals > _DEAD_FRACTION * count
    responsibilities, totals = responsibilities[:, alive], totals[alive]
    weights = totals / totals.sum()
    resultants = (responsibilities.T.astype(x.dtype) @ x).astype(np.float64)
    lengths = np.linalg.norm(resultants, axis=1)
    fallback = x[np.argmax(responsibilities, axis=0)].astype(np.float64)
    safe = np.where(lengths > 0, lengths, 1.0)[:, None]
    directions = np.where(lengths[:, None] > 0, resultants / safe, fallback)
    kappa = solve_concentration(dim, lengths / totals, max_concentration)
    return weights, directions, kappa


def fit_movmf_density(
    embeddings,
    n_components: int,
    seed: int = 0,
    tol: float = 1e-6,
    max_iter: int = 300,
    max_concentration: float = 1e5,
    initial_labels=None,
) -> MovMFDensity:
    """Soft-moVMF EM on unit rows (see the module text); deterministic for a given ``seed``.

    ``initial_labels`` (n,) replaces the k-means initialisation with given hard assignments.
    """
    x = check_unit_rows(embeddings, "embeddings")
    n_components = check_positive_int(n_components, "n_components")
    tol = check_positive_float(tol, "tol", allow_zero=True)
    max_iter = check_positive_int(max_iter, "max_iter")
    max_concentration = check_positive_float(max_concentration, "max_concentration")
    count = x.shape[0]
    if x.shape[1] < 2:
        raise ValueError("a vMF mixture needs embeddings of dimension >= 2")
    if n_components > count:
        raise ValueError(
            f"n_components={n_components} exceeds the number of embeddings ({count}); "
            f"pass n_components <= {count}"
        )
    if initial_labels is None:
        labels = spherical_kmeans_labels(x, n_components, int(seed))
    else:
        labels = np.asarray(initial_labels)
        if labels.shape != (count,) or labels.min() < 0 or labels.max() >= n_components:
            raise ValueError(f"initial_labels must be {count} integers in [0, {n_components})")
    responsibilities = np.zeros((count, n_components))
    responsibilities[np.arange(count), labels] = 1.0
    history: list[float] = []
    converged = False
    for _ in range(max_iter):
        weights, directions, kappa = _m_step(x, responsibilities, max_concentration)
        log_joint = np.log(weights) + log_vmf_normalizer(x.shape[1], kappa)
        log_joint = log_joint + (x @ directions.T.astype(x.dtype)).astype(np.float64) * kappa
        log_likelihood = logsumexp_rows(log_joint)
        responsibilities = np.exp(log_joint - log_likelihood[:, None])
        history.append(float(log_likelihood.mean()))
        if len(history) > 1 and history[-1] - history[-2] < tol:
            converged = True
            break
    return MovMFDensity(weights, directions, kappa, tuple(history), converged)


@dataclass(frozen=True)
class MovMFSelection:
    """The chosen density and, per candidate K, its criterion value (BIC: lower is better;
    held-out: mean held-out log-likelihood, higher is better)."""

    density: MovMFDensity
    criterion: str
    scores: dict[int, float]
    #: held-out split only: indices of the held-out rows and their log-density under the model
    #: of the chosen K fitted without them (an honest reference for new in-distribution images)
    heldout_rows: np.ndarray | None = None
    heldout_log_density: np.ndarray | None = None


def select_movmf_density(
    embeddings,
    candidates=(1, 2, 4, 8, 16, 32, 64),
    criterion: str = "heldout",
    seed: int = 0,
    heldout_fraction: float = 0.2,
    **fit_settings,
) -> MovMFSelection:
    """Fit each candidate K and keep the best by BIC or held-out mean log-likelihood.

    Candidates above the usable count (n, or the training split's size) are skipped. With
    ``heldout`` the chosen K is refitted on all rows.
    """
    if criterion not in SELECTION_CRITERIA:
        raise ValueError(f"criterion must be one of {SELECTION_CRITERIA}, got {criterion!r}")
    x = check_unit_rows(embeddings, "embeddings")
    count = x.shape[0]
    candidates = sorted({check_positive_int(int(k), "candidate n_components") for k in candidates})
    if criterion == "bic":
        usable = [k for k in candidates if k <= count] or [1]
        fits = {k: fit_movmf_density(x, k, seed=seed, **fit_settings) for k in usable}
        scores = {k: fits[k].bic(x) for k in usable}
        best = min(scores, key=scores.get)
        return MovMFSelection(fits[best], criterion, scores)
    if not 0 < heldout_fraction < 1:
        raise ValueError(f"heldout_fraction must be in (0, 1), got {heldout_fraction}")
    held_count = int(round(count * heldout_fraction))
    if held_count < 1 or count - held_count < 1:
        raise ValueError(
            f"{count} embeddings are too few for a held-out split; use criterion='bic'"
        )
    order = np.random.default_rng(seed).permutation(count)
    held, train = np.sort(order[:held_count]), np.sort(order[held_count:])
    usable = [k for k in candidates if k <= len(train)] or [1]
    scores, held_scores = {}, {}
    for k in usable:
        fitted = fit_movmf_density(x[train], k, seed=seed, **fit_settings)
        held_scores[k] = fitted.log_density(x[held])
        scores[k] = float(held_scores[k].mean())
    best = max(scores, key=scores.get)
    density = fit_movmf_density(x, best, seed=seed, **fit_settings)
    return MovMFSelection(density, criterion, scores, held, held_scores[best])
