"""A stand-in encoder of fixed cost for tests and benchmarks (not a model of anything).

``stand-in[:MS[:DIM]]`` embeds an image by area-averaging it to 16 x 16, projecting with a fixed
seeded Gaussian matrix and normalising, then sleeps MS milliseconds per image to stand for model
inference (the way a GPU call costs wall time but little CPU). It is only resolvable when the
environment variable ``CHEXRETRIEVE_TEST_ENCODERS=1`` is set, so it cannot end up in a real store
by accident. Its id depends only on DIM, not on MS: slow and fast runs write the same embeddings.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Sequence

import numpy as np

from chexretrieve.encoders.base import EncoderError

TEST_ENCODERS_ENV = "CHEXRETRIEVE_TEST_ENCODERS"
GRID = 16


class StandInEncoder:
    """Deterministic embeddings of images and texts, with a fixed sleep per image."""

    inv_temperature = 20.0

    def __init__(self, seconds_per_image: float = 0.0, dim: int = 32) -> None:
        if dim < 2 or seconds_per_image < 0:
            raise ValueError(
                f"stand-in encoder needs dim >= 2 and a cost >= 0 (got {dim}, {seconds_per_image})"
            )
        self.embed_dim = dim
        self.seconds_per_image = seconds_per_image
        self.encoder_id = f"stand-in:d{dim}"
        self._projection = np.random.default_rng(dim).standard_normal((GRID * GRID, dim))

    def embed_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        started = time.perf_counter()
        rows = [area_average(np.asarray(image, dtype=np.float32)).ravel() for image in images]
        if not rows:
            return np.zeros((0, self.embed_dim), np.float32)
        features = np.stack(rows)
        features -= features.mean(axis=1, keepdims=True)
        vectors = features @ self._projection
        vectors += 1e-3 * self._projection[0]  # a flat image still gets a direction
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        remaining = self.seconds_per_image * len(rows) - (time.perf_counter() - started)
        if remaining > 0:
            time.sleep(remaining)
        return vectors.astype(np.float32)

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        vectors = np.stack(
            [
                np.random.default_rng(
                    int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
                ).standard_normal(self.embed_dim)
                for text in texts
            ]
        )
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors.astype(np.float32)


def area_average(image: np.ndarray) -> np.ndarray:
    """GRID x GRID means over a near-even partition of the image (any size >= 1 x 1)."""
    if image.ndim != 2 or image.size == 0:
        raise ValueError(f"expected a 2-D image, got shape {image.shape}")
    out = image
    for axis in (0, 1):
        length = out.shape[axis]
        edges = np.linspace(0, length, GRID + 1).astype(int)
        edges = np.minimum(edges, length - 1)[:-1]
        sums = np.add.reduceat(out, edges, axis=axis)
        counts = np.diff(np.append(edges, length)).clip(min=1)
        shape = [1, 1]
        shape[axis] = GRID
        out = sums / counts.reshape(shape)
    return out


def load_stand_in(spec: str) -> StandInEncoder:
    """``stand-in[:MS[:DIM]]``; EncoderError unless CHEXRETRIEVE_TEST_ENCODERS=1 (loaded through
    ``chexretrieve.encoders.registry``, where it is a registered kind)."""
    if os.environ.get(TEST_ENCODERS_ENV) != "1":
        raise EncoderError(
            f"encoder {spec!r} is a test stand-in, not a model; it is only available with "
            f"{TEST_ENCODERS_ENV}=1 (tests and benchmarks)"
        )
    parts = spec.strip().split(":")[1:]
    try:
        milliseconds = float(parts[0]) if parts and parts[0] else 0.0
        dim = int(parts[1]) if len(parts) > 1 else 32
        return StandInEncoder(milliseconds / 1000.0, dim)
    except ValueError as error:
        raise EncoderError(
            f"stand-in spec {spec!r}: expected stand-in[:MS[:DIM]] ({error})"
        ) from None
