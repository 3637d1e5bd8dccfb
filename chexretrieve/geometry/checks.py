"""Input checks shared by every geometry: each failure is a ValueError naming problem and fix."""

from __future__ import annotations

import numpy as np

#: embeddings must satisfy |‖x‖ − 1| <= UNIT_NORM_TOLERANCE (relative to 1) to count as unit-norm
UNIT_NORM_TOLERANCE = 1e-3


def working_dtype(array: np.ndarray) -> type:
    """float32 stays float32 (the gallery's dtype); every other real input becomes float64."""
    return np.float32 if array.dtype == np.float32 else np.float64


def check_unit_rows(
    values, what: str, dim: int | None = None, allow_empty: bool = False
) -> np.ndarray:
    """A finite (n, d) array of unit-norm rows (float32 or float64), or a ValueError saying why."""
    array = np.asarray(values)
    if array.dtype == object or not (
        np.issubdtype(array.dtype, np.floating) or np.issubdtype(array.dtype, np.integer)
    ):
        raise ValueError(f"{what} must be a numeric array, got dtype {array.dtype}")
    if array.ndim != 2:
        raise ValueError(
            f"{what} must be a 2-D array (n, d) of embeddings, got shape {array.shape}; "
            "use x[None, :] for a single vector"
        )
    if array.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{what} is empty (shape {array.shape}); pass at least one embedding")
    if dim is not None and array.shape[1] != dim:
        raise ValueError(
            f"{what} have dimension {array.shape[1]} but the anchors are {dim}-d; embed images "
            "and anchors with the same model"
        )
    array = array.astype(working_dtype(array), copy=False)
    if not np.isfinite(array).all():
        bad = int(np.flatnonzero(~np.isfinite(array).all(axis=1))[0])
        raise ValueError(f"{what} row {bad} contains NaN or infinite values; re-embed it")
    if array.shape[0]:
        norms = np.sqrt(np.einsum("ij,ij->i", array, array, dtype=np.float64))
        off = np.abs(norms - 1.0) > UNIT_NORM_TOLERANCE
        if off.any():
            bad = int(np.flatnonzero(off)[0])
            raise ValueError(
                f"{what} row {bad} has L2 norm {norms[bad]:.6g}, not 1 (tolerance "
                f"{UNIT_NORM_TOLERANCE:g}); L2-normalise the embeddings first "
                "(x / np.linalg.norm(x, axis=1, keepdims=True))"
            )
    return array


def check_inv_temperature(value) -> float:
    """A finite inverse temperature > 0 (CLIP-style models use exp(logit_scale), at most 100)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"inv_temperature must be a positive number, got {value!r}; use the model's "
            "exp(logit_scale), e.g. 100.0"
        ) from None
    if not np.isfinite(value) or value <= 0:
        raise ValueError(
            f"inv_temperature must be finite and > 0, got {value}; use the model's "
            "exp(logit_scale), e.g. 100.0"
        )
    return value


def check_positive_int(value, name: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def check_positive_float(value, name: str, allow_zero: bool = False) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a number, got {value!r}") from None
    if not np.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return number


def check_feature_rows(values, width: int, what: str) -> np.ndarray:
    """Cached feature rows of this geometry (n, width), or a ValueError pointing at features()."""
    array = np.asarray(values)
    if array.ndim != 2 or array.shape[1] != width:
        raise ValueError(
            f"{what} has shape {array.shape} but this geometry's features have {width} columns; "
            "compute them with this geometry's features() (features of another geometry or "
            "raw embeddings do not fit)"
        )
    if not np.issubdtype(array.dtype, np.floating):
        raise ValueError(f"{what} must be a float array, got dtype {array.dtype}")
    return array


def numerical_rank(singular_or_eigen: np.ndarray, size: int) -> int:
    """How many of the (descending, non-negative) spectrum values are above rounding noise."""
    values = np.asarray(singular_or_eigen, dtype=np.float64)
    if values.size == 0 or values[0] <= 0:
        return 0
    cutoff = values[0] * max(size, 1) * np.finfo(np.float64).eps * 10
    return int((values > cutoff).sum())


class CosineEquivalentGeometryError(ValueError):
    """A fitted geometry whose ranking equals cosine's by construction (so it measures nothing
    the cosine baseline does not): a latent model whose subspace is the whole embedding space.

    With U (d, k) orthonormal and k = d, UUᵀ = I, so the latent Gaussian's
    (inv_t²/2)‖Uᵀ(λ1 − λ2)‖² = inv_t²(1 − cos(λ1, λ2)) and the latent spherical model's
    cos(Uᵀλ1, Uᵀλ2) = cos(λ1, λ2) for unit images: both rank every gallery exactly as cosine.
    For k < d, UUᵀ ≠ I and the rankings differ. Search, the UI and the evaluation refuse such a
    geometry with this error's message instead of showing cosine under another name.
    """

    def __init__(self, kind: str, k: int, dim: int, how: str):
        self.kind, self.k, self.dim = kind, k, dim
        super().__init__(
            f"{kind} with k = {k} = d (k {how}) ranks exactly as cosine: its subspace is the "
            f"whole {dim}-d embedding space, so ‖Uᵀ(λ1 − λ2)‖ = ‖λ1 − λ2‖. Use a smaller k (the "
            "default picks k by the 95%-variance rule), or use cosine itself"
        )
