"""The encoder interface every image-text model implements (CheXzero, Hugging Face CLIP, phantom).

Images reach an encoder as 2-D float32 arrays in [0, 1] (0 = black), already decoded and windowed by
``chexretrieve.dicom`` (or read from PNG/JPEG); each encoder applies its own model-specific
preprocessing. Embeddings come back L2-normalised, float32, shape (n, embed_dim).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


class EncoderError(ValueError):
    """A model could not be loaded or used; the message names the file and the problem."""


@runtime_checkable
class Encoder(Protocol):
    #: stable identifier: model name + short hash of the weights, e.g. "chexzero:3f2a9c1d0b7e"
    encoder_id: str
    #: exp(logit_scale) read from the weights; the anchor geometries' default inverse temperature
    inv_temperature: float
    #: length of the joint embedding
    embed_dim: int

    def embed_images(self, images: Sequence[np.ndarray]) -> np.ndarray:
        """(n, embed_dim) float32 unit vectors for greyscale images in [0, 1]."""
        ...

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """(n, embed_dim) float32 unit vectors for sentences."""
        ...
