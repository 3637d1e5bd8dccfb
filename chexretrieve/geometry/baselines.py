"""The two reference scores: cosine similarity and image-text inversion (ITI).

Cosine: λ_qᵀλ_k, task-agnostic. ITI (predict, then retrieve): find the anchor closest to the query,
γ* = argmax_i λ_qᵀγ_i, and rank keys by γ*ᵀλ_k. Neither is a divergence; both cache the embedding
itself as the feature, and ITI's query vector is γ*, so both fit a maximum-inner-product index.
"""

from __future__ import annotations

import numpy as np

from chexretrieve.geometry.base import AnchorGeometry


class CosineGeometry(AnchorGeometry):
    """Cosine similarity of unit embeddings (anchors are not used)."""

    kind = "cosine"
    is_divergence = False

    def __init__(self, dim: int | None, inv_temperature: float):
        super().__init__(dim, inv_temperature, None)

    @property
    def feature_dim(self) -> int:
        if self.dim is None:
            raise ValueError(
                "this cosine geometry was fitted without anchors, so its dimension is unknown "
                "until features are computed; pass anchors (or any (1, d) unit vector) to fix it"
            )
        return self.dim

    def features(self, x) -> np.ndarray:
        if self.dim is None:
            self.dim = int(np.shape(x)[1]) if np.ndim(x) == 2 else None
        return super().features(x)

    def _feature_rows(self, x: np.ndarray) -> np.ndarray:
        return x

    def key_vectors(self, fk) -> np.ndarray:
        if self.dim is None and np.ndim(fk) == 2:
            self.dim = int(np.shape(fk)[1])
        return super().key_vectors(fk)

    def query_vectors(self, fq) -> np.ndarray:
        if self.dim is None and np.ndim(fq) == 2:
            self.dim = int(np.shape(fq)[1])
        return super().query_vectors(fq)

    def _plain_query_vectors(self, fq: np.ndarray) -> np.ndarray:
        return fq


class ImageTextInversionGeometry(AnchorGeometry):
    """Score keys by their cosine to the anchor nearest the query."""

    kind = "iti"
    is_divergence = False

    def __init__(self, anchors: np.ndarray, inv_temperature: float):
        super().__init__(anchors.shape[1], inv_temperature, anchors.astype(np.float64))

    @property
    def feature_dim(self) -> int:
        return self.dim

    def _feature_rows(self, x: np.ndarray) -> np.ndarray:
        return x

    def nearest_anchor(self, fq) -> np.ndarray:
        """(n,) index of the anchor each query row is closest to (first one on ties)."""
        fq = np.asarray(fq)
        return np.argmax(fq @ self._cast("anchors", fq.dtype).T, axis=1)

    def _plain_query_vectors(self, fq: np.ndarray) -> np.ndarray:
        return self._cast("anchors", fq.dtype)[self.nearest_anchor(fq)]
