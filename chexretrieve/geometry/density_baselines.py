"""Two baselines for the vMF mixture density: a shrinkage Gaussian and a k-NN cosine score.

Both give a "typicality" score, higher = more like the archive, on the same scale convention as
:meth:`MovMFDensity.log_density`, so one OOD threshold rule (a low percentile of the archive's own
scores) applies to all three.

* :class:`GaussianDensity`: N(μ, Σ) on R^d with the Ledoit–Wolf shrinkage covariance
  Σ = (1 − δ) S + δ m I (S the MLE covariance, m = tr S / d, δ the Ledoit–Wolf 2004 estimate of
  the optimal shrinkage), so it is well-posed when the archive has fewer images than dimensions.
  Its log-density ignores that the data lie on the sphere (the seed's point): it is the
  Gaussian's log-density in R^d, i.e. −½ Mahalanobis² plus a constant.
* :class:`KnnCosineScore`: the mean cosine similarity to the k most similar archive embeddings
  (for archive images themselves, excluding the image: ``leave_one_out``).
"""

from __future__ import annotations

import numpy as np

from chexretrieve.geometry.checks import check_positive_int, check_unit_rows


def ledoit_wolf_covariance(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(mean, shrunk covariance, δ) for rows x (n, d), Ledoit & Wolf (2004), their Lemma 3.2–3.4.

    With ⟨A, B⟩ = tr(ABᵀ)/d: m = ⟨S, I⟩, d² = ‖S − mI‖², b̄² = (1/n²) Σ_i ‖x_i x_iᵀ − S‖²
    (centred x_i), b² = min(b̄², d²), δ = b²/d².
    """
    x = np.asarray(x, dtype=np.float64)
    count, dim = x.shape
    mean = x.mean(axis=0)
    centred = x - mean
    scatter = centred.T @ centred / count
    m = np.trace(scatter) / dim
    spread = (np.sum(scatter * scatter) - 2 * m * np.trace(scatter) + dim * m * m) / dim
    sq_norms = np.einsum("ij,ij->i", centred, centred)
    quad = np.einsum("ij,ij->i", centred @ scatter, centred)
    per_row = (sq_norms**2 - 2 * quad + np.sum(scatter * scatter)) / dim
    b_bar = per_row.sum() / count**2
    shrinkage = 1.0 if spread <= 0 else float(min(b_bar, spread) / spread)
    covariance = (1 - shrinkage) * scatter + shrinkage * m * np.eye(dim)
    return mean, covariance, shrinkage


class GaussianDensity:
    """Gaussian density with Ledoit–Wolf shrinkage covariance; score = log N(x; μ, Σ)."""

    kind = "gaussian"

    def __init__(self, mean: np.ndarray, covariance: np.ndarray, shrinkage: float = 0.0):
        self.mean = np.asarray(mean, dtype=np.float64)
        self.covariance = np.asarray(covariance, dtype=np.float64)
        self.shrinkage = float(shrinkage)
        values, vectors = np.linalg.eigh(self.covariance)
        if values.min() <= 0:
            raise ValueError("the covariance is not positive definite; the shrinkage fit failed")
        #: whitening W with ‖W(x − μ)‖² the Mahalanobis distance squared
        self._whiten = (vectors / np.sqrt(values)).T
        dim = self.mean.shape[0]
        self._constant = -0.5 * (dim * np.log(2 * np.pi) + np.log(values).sum())

    @classmethod
    def fit(cls, embeddings) -> GaussianDensity:
        x = check_unit_rows(embeddings, "embeddings")
        if x.shape[0] < 2:
            raise ValueError("a Gaussian density needs at least 2 embeddings")
        return cls(*ledoit_wolf_covariance(x))

    def mahalanobis_squared(self, embeddings) -> np.ndarray:
        x = check_unit_rows(embeddings, "embeddings", self.mean.shape[0]).astype(np.float64)
        white = (x - self.mean) @ self._whiten.T
        return np.einsum("ij,ij->i", white, white)

    def log_density(self, embeddings) -> np.ndarray:
        return self._constant - 0.5 * self.mahalanobis_squared(embeddings)

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {"mean": self.mean, "covariance": self.covariance, "shrinkage": self.shrinkage}

    @classmethod
    def from_arrays(cls, arrays) -> GaussianDensity:
        return cls(arrays["mean"], arrays["covariance"], float(arrays["shrinkage"]))


class KnnCosineScore:
    """Mean cosine similarity to the k nearest archive embeddings (higher = more typical)."""

    kind = "knn"

    def __init__(self, archive, k: int = 10):
        self.archive = check_unit_rows(archive, "archive embeddings")
        self.k = check_positive_int(k, "k")
        if self.archive.shape[0] < self.k + 1:
            raise ValueError(
                f"k={self.k} needs at least {self.k + 1} archive embeddings "
                f"(got {self.archive.shape[0]})"
            )

    def score(self, embeddings, leave_one_out: bool = False, batch: int = 2048) -> np.ndarray:
        """Per row: the mean of its k largest cosines to the archive. With ``leave_one_out`` the
        rows must be the archive itself (same order) and each row's own entry is excluded."""
        x = check_unit_rows(embeddings, "embeddings", self.archive.shape[1])
        if leave_one_out and x.shape[0] != self.archive.shape[0]:
            raise ValueError("leave_one_out scores the archive itself: pass the archive rows")
        out = np.empty(x.shape[0])
        for start in range(0, x.shape[0], batch):
            cosines = (x[start : start + batch] @ self.archive.T).astype(np.float64)
            if leave_one_out:
                rows = np.arange(cosines.shape[0])
                cosines[rows, start + rows] = -np.inf
            top = np.partition(cosines, cosines.shape[1] - self.k, axis=1)[:, -self.k :]
            out[start : start + batch] = top.mean(axis=1)
        return out

    def log_density(self, embeddings) -> np.ndarray:
        """Alias of :meth:`score`, so the three models share one interface."""
        return self.score(embeddings)
