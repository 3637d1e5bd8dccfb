"""The softmax anchor divergence: the geometry of the empirical (weighted) anchor distribution.

An image λ puts probability P(i | λ) = w_i exp(inv_t λᵀγ_i) / Σ_j w_j exp(inv_t λᵀγ_j) on the
anchors (w_i = 1/N unless weights are given). Two images are compared by the KL divergence of these
distributions, d(λ1 ‖ λ2) = KL(P(·|λ1) ‖ P(·|λ2)). The same number is the Bregman divergence of the
empirical CGF κ̂(η) = log Σ_i w_i exp(ηᵀγ_i):  d(λ1 ‖ λ2) = κ̂(η2) − κ̂(η1) − ∇κ̂(η1)ᵀ(η2 − η1), with
η = inv_t·λ and ∇κ̂(η) = Σ_i P(i|η) γ_i.

Why it is cheap. Subtracting the weighted anchor mean γ̄ from every anchor only adds a linear term to
κ̂, which no Bregman divergence sees. After that, the gradient lives in the span of the centred
anchors, of dimension p ≤ min(N − 1, d). With Q an orthonormal basis of that span (from an SVD), an
image needs only e = Qᵀη and h = Qᵀ(∇κ̂(η) − γ̄): 2p + 1 feature numbers, fewer than cosine's d when
N < d/2 + 1. The logits themselves are eᵀQᵀ(γ_i − γ̄), so features need only p-dimensional
products.

Memory. Anchors are visited in chunks with a running log-sum-exp (running maximum, rescaled sum
and rescaled gradient), so the temporary block is rows × chunk whatever N is.

Mixtures of anchor sets. q_p = p·q_A + (1 − p)·q_B is again an anchor distribution; its empirical
version is the union of both sets with weights p/N_A and (1 − p)/N_B (``mix_anchor_sets``).
"""

from __future__ import annotations

import numpy as np
from scipy.special import log_softmax

from chexretrieve.geometry.base import BregmanGeometry
from chexretrieve.geometry.checks import check_positive_int, check_unit_rows, numerical_rank

#: anchors visited together when computing features (the log-sum-exp is accumulated over chunks)
DEFAULT_ANCHOR_CHUNK = 2048


def check_weights(weights, count: int) -> np.ndarray:
    """Per-anchor weights as a float64 vector summing to 1, or a ValueError saying what is wrong."""
    array = np.asarray(weights, dtype=np.float64) if weights is not None else None
    if array is None:
        return np.full(count, 1.0 / count)
    if array.shape != (count,):
        raise ValueError(
            f"weights has shape {array.shape} but there are {count} anchors; pass one weight "
            "per anchor"
        )
    if not np.isfinite(array).all() or (array < 0).any():
        raise ValueError("weights must be finite and >= 0 (they are relative anchor masses)")
    total = array.sum()
    if total <= 0:
        raise ValueError("weights sum to 0; give at least one anchor a positive weight")
    return array / total


def mix_anchor_sets(anchors_a, anchors_b, p: float) -> tuple[np.ndarray, np.ndarray]:
    """Union of two anchor sets with weights p/N_A and (1 − p)/N_B: the mixture p·q_A + (1−p)·q_B.

    Returns ``(anchors, weights)`` for ``fit_geometry("softmax", anchors, weights=weights)``.
    """
    a = check_unit_rows(anchors_a, "anchors_a").astype(np.float64)
    b = check_unit_rows(anchors_b, "anchors_b", a.shape[1]).astype(np.float64)
    try:
        p = float(p)
    except (TypeError, ValueError):
        raise ValueError(f"mixing weight p must be a number in [0, 1], got {p!r}") from None
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"mixing weight p must lie in [0, 1], got {p}")
    weights = np.concatenate([np.full(len(a), p / len(a)), np.full(len(b), (1.0 - p) / len(b))])
    return np.vstack([a, b]), weights


class SoftmaxGeometry(BregmanGeometry):
    """KL between anchor softmax distributions; see the module docstring."""

    kind = "softmax"

    def __init__(
        self,
        anchors: np.ndarray,
        inv_temperature: float,
        weights=None,
        anchor_chunk: int = DEFAULT_ANCHOR_CHUNK,
    ):
        anchors = anchors.astype(np.float64)
        super().__init__(anchors.shape[1], inv_temperature, anchors)
        self.anchor_chunk = check_positive_int(anchor_chunk, "anchor_chunk")
        #: normalised per-anchor weights (N,), summing to 1
        self.weights = check_weights(weights, len(anchors))
        kept = self.weights > 0
        #: ∇κ̂(0): the weighted mean anchor
        self.mean_anchor = self.weights @ anchors
        centred = anchors[kept] - self.mean_anchor
        _, singular, rows = np.linalg.svd(centred, full_matrices=False)
        rank = numerical_rank(singular, max(centred.shape))
        if rank == 0:
            raise ValueError(
                "the softmax geometry needs at least two distinct anchors with positive weight; "
                "with one direction every image gets the same anchor distribution"
            )
        if rank == self.dim:
            #: (d, p) orthonormal basis of the span of the centred anchors
            self.basis = np.eye(self.dim)
            self._identity_basis = True
        else:
            self.basis = rows[:rank].T.copy()
            self._identity_basis = False
        #: (N_kept, p) centred anchors in basis coordinates
        self.anchor_coords = centred @ self.basis
        self.log_weights = np.log(self.weights[kept])
        self._kept = kept

    def _potential(self, x: np.ndarray):
        dtype = x.dtype
        if self._identity_basis:
            e = self.inv_temperature * x
        else:
            e = self.inv_temperature * (x @ self._cast("basis", dtype))
        coords = self._cast("anchor_coords", dtype)
        log_weights = self._cast("log_weights", dtype)
        running_max = np.full(x.shape[0], -np.inf, dtype=dtype)
        total = np.zeros(x.shape[0], dtype=dtype)
        gradient = np.zeros((x.shape[0], coords.shape[1]), dtype=dtype)
        for start in range(0, coords.shape[0], self.anchor_chunk):
            block = coords[start : start + self.anchor_chunk]
            logits = e @ block.T
            logits += log_weights[start : start + self.anchor_chunk]
            new_max = np.maximum(running_max, logits.max(axis=1))
            rescale = np.exp(running_max - new_max)
            logits -= new_max[:, None]
            np.exp(logits, out=logits)
            total = total * rescale + logits.sum(axis=1)
            gradient *= rescale[:, None]
            gradient += logits @ block
            running_max = new_max
        gradient /= total[:, None]
        return running_max + np.log(total), e, gradient

    def anchor_probabilities(self, x) -> np.ndarray:
        """(n, N) softmax distribution P(i | λ) over all anchors (zero-weight anchors get 0)."""
        x = check_unit_rows(x, "images", self.dim).astype(np.float64)
        out = np.zeros((x.shape[0], len(self.anchors)))
        logits = self.inv_temperature * (x @ self.anchors[self._kept].T) + self.log_weights
        out[:, self._kept] = np.exp(log_softmax(logits, axis=1))
        return out

    def anchor_contributions(self, q, k) -> np.ndarray:
        """Per-anchor terms of the symmetrised KL between q and k; they are >= 0 and sum to d_sym.

        d_sym = ½[KL(P_q‖P_k) + KL(P_k‖P_q)] = Σ_i ½ (P_q,i − P_k,i)(log P_q,i − log P_k,i).
        One pair of vectors (d,) gives (N,); two (n, d) arrays give (n, N), row i for pair i.
        Large entries name the anchor sentences that separate the two images.
        """
        single = np.ndim(q) == 1 and np.ndim(k) == 1
        q = check_unit_rows(np.atleast_2d(q), "query", self.dim).astype(np.float64)
        k = check_unit_rows(np.atleast_2d(k), "key", self.dim).astype(np.float64)
        if q.shape != k.shape:
            raise ValueError(
                f"anchor_contributions compares pairs row by row, got shapes {q.shape} and "
                f"{k.shape}; pass one query and one key, or two arrays of equal length"
            )
        anchors = self.anchors[self._kept]
        log_q = log_softmax(self.inv_temperature * (q @ anchors.T) + self.log_weights, axis=1)
        log_k = log_softmax(self.inv_temperature * (k @ anchors.T) + self.log_weights, axis=1)
        out = np.zeros((q.shape[0], len(self.anchors)))
        out[:, self._kept] = 0.5 * (np.exp(log_q) - np.exp(log_k)) * (log_q - log_k)
        return out[0] if single else out
