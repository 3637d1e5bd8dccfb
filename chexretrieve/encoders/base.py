"""The encoder interface every image-text model implements (CheXzero, Hugging Face CLIP, phantom).

Images reach an encoder as 2-D float32 arrays in [0, 1] (0 = black), already decoded and windowed by
``chexretrieve.dicom`` (or read from PNG/JPEG); each encoder applies its own model-specific
preprocessing. Embeddings come back L2-normalised, float32, shape (n, embed_dim).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np

#: transformers' top-level module resolves its names lazily, and not safely for threads: two
#: threads asking for ``AutoModel`` at once (a server's first search and its warm-up thread)
#: made one fail with "cannot import name 'AutoModel' from 'transformers'" (issue 36); every
#: name of it chexretrieve uses is resolved through :func:`from_transformers`, under this lock
_TRANSFORMERS_LOCK = threading.Lock()


class EncoderError(ValueError):
    """A model could not be loaded or used; the message names the file and the problem."""


def from_transformers(*names: str) -> tuple:
    """The named attributes of ``transformers`` (e.g. "AutoModel"), resolved one thread at a
    time; "utils.logging" names a submodule's attribute."""
    with _TRANSFORMERS_LOCK:
        import transformers

        found = []
        for name in names:
            value = transformers
            for part in name.split("."):
                value = getattr(value, part)
            found.append(value)
        return tuple(found)


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


def split_preprocessing(encoder) -> tuple[Callable[[np.ndarray], np.ndarray], Callable] | None:
    """(preprocess, embed_preprocessed) when the encoder offers its image preprocessing apart from
    the model, else None.

    An encoder may offer ``image_preprocessor()``: a picklable, CPU-only callable turning one
    greyscale image in [0, 1] into its float32 model input, and ``embed_preprocessed(inputs)`` for
    a stack of those inputs; ``embed_images(images)`` then equals
    ``embed_preprocessed(np.stack([preprocess(i) for i in images]))``. Ingest runs the
    preprocessing in its decoding workers, so the process that drives the model only runs it.
    """
    preprocessor = getattr(encoder, "image_preprocessor", None)
    embed = getattr(encoder, "embed_preprocessed", None)
    if not callable(preprocessor) or not callable(embed):
        return None
    return preprocessor(), embed


def embed_through_preprocessor(encoder, images: Sequence[np.ndarray]) -> np.ndarray:
    """``embed_images`` of an encoder with split preprocessing: images checked once, then
    preprocessed and embedded ``encoder.batch_size`` at a time (``preprocess.checked`` skips the
    second check)."""
    preprocess = encoder.image_preprocessor()
    images = check_greyscale_images(images)
    out = np.zeros((len(images), encoder.embed_dim), dtype=np.float32)
    for start in range(0, len(images), encoder.batch_size):
        chunk = images[start : start + encoder.batch_size]
        out[start : start + len(chunk)] = encoder.embed_preprocessed(
            np.stack([preprocess.checked(image) for image in chunk])
        )
    return out


#: values this far outside [0, 1] are clipped back silently (decoder rounding); beyond it the image
#: is rejected
RANGE_TOLERANCE = 1e-4


def check_greyscale_images(images: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The images as 2-D float32 arrays in [0, 1]; ValueError naming the first bad one and why."""
    return _checked_images(images, colour=False)


def check_rgb_images(images: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The images as (rows, columns, 3) float32 arrays in [0, 1]; ValueError naming the first bad
    one and why (encoders that keep colour offer ``embed_rgb_images``)."""
    return _checked_images(images, colour=True)


def _checked_images(images: Sequence[np.ndarray], colour: bool) -> list[np.ndarray]:
    method, ndim = ("embed_rgb_images", 3) if colour else ("embed_images", 2)
    expected = "(rows, columns, 3) RGB arrays" if colour else "2-D greyscale arrays (rows, columns)"
    if isinstance(images, np.ndarray) and images.ndim == ndim:
        raise ValueError(
            f"{method} takes a sequence of {ndim}-D images; wrap a single image in a list"
        )
    checked = []
    for index, image in enumerate(images):
        array = np.asarray(image)
        if array.ndim != ndim or (colour and array.shape[-1] != 3):
            raise ValueError(
                f"image {index} has shape {array.shape}: {method} takes {expected} in [0, 1]"
            )
        if min(array.shape) < 1:
            raise ValueError(f"image {index} is empty (shape {array.shape})")
        if not np.issubdtype(array.dtype, np.floating):
            raise ValueError(
                f"image {index} has dtype {array.dtype}: encoders take float images scaled to "
                "[0, 1] (divide integer pixels by their maximum first)"
            )
        array = array.astype(np.float32, copy=False)
        if not np.isfinite(array).all():
            raise ValueError(f"image {index} contains NaN or infinite pixels")
        low, high = float(array.min()), float(array.max())
        if low < -RANGE_TOLERANCE or high > 1 + RANGE_TOLERANCE:
            raise ValueError(
                f"image {index} has values in [{low:.4g}, {high:.4g}]: encoders take images "
                "scaled to [0, 1]"
            )
        checked.append(np.clip(array, 0.0, 1.0))
    return checked


def check_texts(texts: Sequence[str]) -> list[str]:
    """The sentences as a list of str; ValueError when a bare string or a non-string is given."""
    if isinstance(texts, str):
        raise ValueError("embed_texts takes a sequence of sentences; wrap a single one in a list")
    checked = list(texts)
    for index, text in enumerate(checked):
        if not isinstance(text, str):
            raise ValueError(f"text {index} is a {type(text).__name__}, not a str")
    return checked


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 norm, float32; a zero row raises (the model produced no direction)."""
    vectors = np.asarray(vectors, dtype=np.float64)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    if vectors.size and not (norms > 0).all():
        raise EncoderError("the model produced an all-zero embedding, which has no direction")
    return (vectors / np.where(norms > 0, norms, 1.0)).astype(np.float32)
