"""The object every geometry is: features once per item, then scores as one matrix product.

Three feature layouts cover all kinds (F = feature width; every score is
``query_vectors(fq) @ fk.T + query_offsets(fq)[:, None]``, so the cached gallery features *are* the
key vectors a maximum-inner-product index stores):

``plain`` (cosine, ITI)
    f = λ (d columns). Cosine: query vector λ_q. ITI: query vector γ* = the anchor closest to λ_q.
``quadratic`` (gaussian, latent_gaussian, latent_spherical; the divergence is symmetric)
    f = [z, −½‖z‖²] with d(λ1 ‖ λ2) = ½‖z1 − z2‖². Query vector [z_q, 1], query offset −½‖z_q‖²:
    z_qᵀz_k − ½‖z_k‖² − ½‖z_q‖² = −½‖z_q − z_k‖².
``bregman`` (softmax, gmm, movmf)
    f = [e, h, −½ eᵀh] where e are coordinates of η = inv_t·λ and h of the (shifted) gradient
    ∇κ(η) − ∇κ(0) in one orthonormal basis. For any Bregman divergence the symmetrised version is
    d_sym(q, k) = ½ (η_q − η_k)ᵀ(∇κ(η_q) − ∇κ(η_k)) = ½ (e_q − e_k)ᵀ(h_q − h_k), so with the query
    vector [½h_q, ½e_q, 1] and the offset −½ e_qᵀh_q the score is exactly −d_sym(q, k).
    When the gradient is s·η plus a part in a narrow basis (a GMM whose covariances share the
    floor s·I), the features are [√s·η, e, h, −½ s‖η‖² − ½ eᵀh] and the query vector
    [√s·η_q, ½h_q, ½e_q, 1]: d + 2p + 1 numbers instead of 2d + 1.

Shifting κ by a linear function (κ(η) − cᵀη) leaves every Bregman divergence unchanged; we use it
to centre gradients (smaller numbers, better float32 scores) and, for the softmax, to work in the
span of the centred anchors only.
"""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import cdist

from chexretrieve.geometry.checks import check_feature_rows, check_unit_rows

#: rows of images processed together when computing features (bounds temporary memory)
ROW_CHUNK = 4096


class AnchorGeometry:
    """A fitted geometry on unit image embeddings; build one with ``fit_geometry``."""

    #: one of GEOMETRY_KINDS
    kind: str = ""
    #: "plain", "quadratic" or "bregman" (see the module docstring)
    layout: str = "plain"
    #: whether ``divergence`` is defined (False for the cosine and ITI baselines)
    is_divergence: bool = True

    def __init__(self, dim: int | None, inv_temperature: float, anchors: np.ndarray | None):
        self.dim = dim
        self.inv_temperature = float(inv_temperature)
        self.anchors = anchors
        self._cast_cache: dict[tuple[str, type], np.ndarray] = {}

    # ----------------------------------------------------------------- subclasses fill these in
    @property
    def feature_dim(self) -> int:
        """Columns of ``features``; query vectors have the same width."""
        raise NotImplementedError

    def _feature_rows(self, x: np.ndarray) -> np.ndarray:
        """Features of a checked chunk of rows, in the chunk's dtype."""
        raise NotImplementedError

    # ----------------------------------------------------------------------------- public API
    def features(self, x) -> np.ndarray:
        """(n, F) per-item features in the input's dtype (float32 stays float32); cache them."""
        x = check_unit_rows(x, "images", self.dim, allow_empty=True)
        out = np.empty((x.shape[0], self.feature_dim), dtype=x.dtype)
        for start in range(0, x.shape[0], ROW_CHUNK):
            stop = start + ROW_CHUNK
            out[start:stop] = self._feature_rows(x[start:stop])
        return out

    def key_vectors(self, fk) -> np.ndarray:
        """What a maximum-inner-product index stores per key: the features themselves."""
        return check_feature_rows(fk, self.feature_dim, "key features")

    def query_vectors(self, fq) -> np.ndarray:
        """(n, F) vectors with score = query_vectors(fq) @ fk.T + query_offsets(fq)[:, None]."""
        fq = check_feature_rows(fq, self.feature_dim, "query features")
        if self.layout == "quadratic":
            out = np.empty_like(fq)
            out[:, :-1] = fq[:, :-1]
            out[:, -1] = 1.0
            return out
        if self.layout == "bregman":
            return self._bregman_query_vectors(fq)
        return self._plain_query_vectors(fq)

    def query_offsets(self, fq) -> np.ndarray:
        """(n,) per-query constant of the score; it never changes a query's ranking."""
        fq = check_feature_rows(fq, self.feature_dim, "query features")
        if self.layout in ("quadratic", "bregman"):
            return fq[:, -1].copy()
        return np.zeros(fq.shape[0], dtype=fq.dtype)

    def score(self, fq, fk) -> np.ndarray:
        """(n, m) similarity from cached features alone; equals ``similarity(q, k)``."""
        fk = self.key_vectors(fk)
        return self.query_vectors(fq) @ fk.T + self.query_offsets(fq)[:, None]

    def similarity(self, q, k) -> np.ndarray:
        """(n, m), higher = more similar: −d_sym for divergence kinds, cosine, or the ITI score."""
        return self.score(self.features(q), self.features(k))

    def divergence(self, a, b) -> np.ndarray:
        """(n, m) matrix of d(a_i ‖ b_j), the asymmetric anchor divergence."""
        if not self.is_divergence:
            raise ValueError(
                f"geometry {self.kind!r} is a baseline score, not a divergence; use similarity(), "
                "or a divergence kind (softmax, gaussian, latent_*, gmm, movmf)"
            )
        a = check_unit_rows(a, "images", self.dim)
        b = check_unit_rows(b, "images", self.dim)
        dtype = np.result_type(a.dtype, b.dtype)
        return self._divergence(a.astype(dtype, copy=False), b.astype(dtype, copy=False))

    def _divergence(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _plain_query_vectors(self, fq: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _cast(self, name: str, dtype: type) -> np.ndarray:
        """A fitted float64 array attribute in the working dtype, cast once and kept."""
        key = (name, dtype)
        if key not in self._cast_cache:
            self._cast_cache[key] = np.ascontiguousarray(getattr(self, name), dtype=dtype)
        return self._cast_cache[key]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(kind={self.kind!r}, dim={self.dim}, "
            f"inv_temperature={self.inv_temperature:g}, feature_dim={self.feature_dim})"
        )


class QuadraticGeometry(AnchorGeometry):
    """d(λ1 ‖ λ2) = ½‖z(λ1) − z(λ2)‖² for a per-item map z (symmetric divergences)."""

    layout = "quadratic"

    def _embed(self, x: np.ndarray) -> np.ndarray:
        """z for a chunk of rows, in the chunk's dtype."""
        raise NotImplementedError

    @property
    def feature_dim(self) -> int:
        return self.embed_dim + 1

    @property
    def embed_dim(self) -> int:
        raise NotImplementedError

    def _feature_rows(self, x: np.ndarray) -> np.ndarray:
        z = self._embed(x)
        out = np.empty((x.shape[0], z.shape[1] + 1), dtype=x.dtype)
        out[:, :-1] = z
        out[:, -1] = -0.5 * np.einsum("ij,ij->i", z, z)
        return out

    def _divergence(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        za, zb = self._embed(a), self._embed(b)
        return (0.5 * cdist(za, zb, "sqeuclidean")).astype(za.dtype, copy=False)


class BregmanGeometry(AnchorGeometry):
    """d(λ1 ‖ λ2) = B_κ(η2 ‖ η1) for a CGF κ of an anchor model, η = inv_t · λ.

    Subclasses return, per chunk, the shifted CGF κ̃ and coordinates e = Qᵀη, h in an orthonormal
    basis Q such that ∇κ(η) − ∇κ(0) = s·η + Q h with s = ``isotropic``. With s = 0 the features
    are [e, h, −½ eᵀh]; with s > 0 (a GMM whose covariances share the floor s·I) they are
    [√s·η, e, h, −½ s‖η‖² − ½ eᵀh], which is shorter than 2d + 1 when Q is narrow.
    """

    layout = "bregman"
    #: s ≥ 0: the part s·η of every shifted gradient that lies outside the basis Q
    isotropic: float = 0.0

    #: (d, p) orthonormal basis Q that e and h are coordinates in (set by subclasses)
    basis: np.ndarray
    #: ∇κ(0), the model's mean anchor, subtracted from every gradient (set by subclasses)
    mean_anchor: np.ndarray

    @property
    def coordinate_dim(self) -> int:
        """Length of e and h (the span the gradients live in)."""
        return self.basis.shape[1]

    @property
    def feature_dim(self) -> int:
        return 2 * self.coordinate_dim + 1 + (self.dim if self.isotropic > 0 else 0)

    def _potential(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(κ̃, e, h) for a chunk: shifted CGF, coordinates of η and of the shifted gradient."""
        raise NotImplementedError

    def _feature_rows(self, x: np.ndarray) -> np.ndarray:
        _, e, h = self._potential(x)
        p = e.shape[1]
        out = np.empty((x.shape[0], self.feature_dim), dtype=x.dtype)
        constant = -0.5 * np.einsum("ij,ij->i", e, h)
        if self.isotropic > 0:
            eta = self.inv_temperature * x
            out[:, : self.dim] = np.sqrt(self.isotropic) * eta
            constant -= 0.5 * self.isotropic * np.einsum("ij,ij->i", eta, eta)
        offset = self.feature_dim - 2 * p - 1
        out[:, offset : offset + p] = e
        out[:, offset + p : offset + 2 * p] = h
        out[:, -1] = constant
        return out

    def _bregman_query_vectors(self, fq: np.ndarray) -> np.ndarray:
        p = self.coordinate_dim
        offset = self.feature_dim - 2 * p - 1
        out = np.empty_like(fq)
        out[:, :offset] = fq[:, :offset]
        out[:, offset : offset + p] = 0.5 * fq[:, offset + p : offset + 2 * p]
        out[:, offset + p : offset + 2 * p] = 0.5 * fq[:, offset : offset + p]
        out[:, -1] = 1.0
        return out

    def _potential_all(self, x: np.ndarray):
        parts = [self._potential(x[s : s + ROW_CHUNK]) for s in range(0, x.shape[0], ROW_CHUNK)]
        return tuple(np.concatenate(column) for column in zip(*parts, strict=True))

    def _divergence(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        ka, ea, ha = self._potential_all(a)
        kb, eb, _ = self._potential_all(b)
        # B_κ(η_b ‖ η_a) = κ(η_b) − κ(η_a) − ∇κ(η_a)ᵀ(η_b − η_a)
        inner_own = np.einsum("ij,ij->i", ha, ea)
        out = kb[None, :] - ka[:, None] - ha @ eb.T + inner_own[:, None]
        if self.isotropic > 0:
            eta_a, eta_b = self.inv_temperature * a, self.inv_temperature * b
            own = np.einsum("ij,ij->i", eta_a, eta_a)
            out -= self.isotropic * (eta_a @ eta_b.T - own[:, None])
        return out

    def cgf_and_gradient(self, x) -> tuple[np.ndarray, np.ndarray]:
        """κ(η) and ∇κ(η) in ambient coordinates for unit rows x (η = inv_t·x)."""
        x = check_unit_rows(x, "images", self.dim)
        kappa, e, h = self._potential_all(x)
        eta = self.inv_temperature * x.astype(np.float64)
        gradient = h.astype(np.float64) @ self.basis.T + self.mean_anchor + self.isotropic * eta
        return kappa + eta @ self.mean_anchor, gradient
