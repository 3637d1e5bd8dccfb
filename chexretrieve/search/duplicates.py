"""Copies of an uploaded query in the archive, found by image content (issue 24, defect 2).

An upload of an archived image as PNG, JPEG or at another size has new pixels and no DICOM UIDs,
so neither the study UID nor the pixel hash finds it, and it came back at rank 1. Two tests, both
stated in SearchConfig:

1. *prefilter*: archived images whose embedding's cosine with the query image's embedding is at
   least ``duplicate_cosine`` (0.9) are candidates, the ``duplicate_candidates`` closest of them;
   the embedding alone does not separate copies from look-alikes (measured with the phantom
   encoder: a 512-px PNG of RG1 against the DICOM 0.980, distinct phantoms against their nearest
   other phantom up to 0.988; ``benchmarks/near_duplicates.py``);
2. *content*: a candidate is a copy when the correlation of its stored thumbnail's content
   signature with the query's is at least ``duplicate_correlation`` (0.98). The signature is the
   image shrunk to 32 x 32 (area average), minus its 3 x 3 local mean (the structure, not the
   overall brightness), centred and scaled to unit length. Measured: RG1 as PNG, JPEG (quality 75)
   and 512-px PNG against its ingest thumbnail 0.9984-0.9993; 300 distinct phantoms against the
   most similar other phantom at most 0.941 (median 0.752).

Candidates without a stored thumbnail (a store ingested before thumbnails existed) are never
called copies. Pure numpy plus Pillow for the resize.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

#: side of the content signature's grid
SIGNATURE_SIDE = 32

#: image ids -> their stored thumbnail PNGs (chexretrieve.store.Store.read_thumbnails)
ThumbnailReader = Callable[[Sequence[int]], Mapping[int, bytes]]


def content_signature(pixels: np.ndarray) -> np.ndarray:
    """The unit-length content signature (``SIGNATURE_SIDE``² float64) of a greyscale image:
    display floats in [0, 1] or 8-bit values. A flat image has the zero signature."""
    from PIL import Image

    image = np.asarray(pixels)
    if image.ndim != 2 or image.size == 0:
        raise ValueError(f"a content signature needs a 2-D image, got shape {image.shape}")
    values = image.astype(np.float32)
    if image.dtype == np.uint8:
        values /= np.float32(255.0)
    side = SIGNATURE_SIDE
    small = np.asarray(
        Image.fromarray(values).resize((side, side), Image.Resampling.BOX), dtype=np.float64
    )
    padded = np.pad(small, 1, mode="edge")
    local = sum(padded[i : i + side, j : j + side] for i in range(3) for j in range(3)) / 9.0
    structure = small - local
    structure -= structure.mean()
    norm = np.linalg.norm(structure)
    return (structure / norm if norm > 1e-12 else structure).ravel()


def find_copies(
    query_embedding: np.ndarray,
    query_signature: np.ndarray,
    embeddings: np.ndarray,
    image_ids: np.ndarray,
    read_thumbnails: ThumbnailReader,
    cosine: float,
    correlation: float,
    limit: int,
) -> tuple[int, ...]:
    """Image ids of the archived copies of the query (see the module's two tests)."""
    from chexretrieve.dicom.thumbnails import thumbnail_pixels

    query = np.asarray(query_embedding, dtype=np.float64).reshape(-1)
    query = query / np.linalg.norm(query)
    rows = np.asarray(embeddings)
    cosines = (rows @ query.astype(rows.dtype)).astype(np.float64)
    norms = np.linalg.norm(rows.astype(np.float32), axis=1).astype(np.float64)
    cosines /= np.where(norms > 0, norms, 1.0)
    close = np.flatnonzero(cosines >= cosine)
    if len(close) == 0:
        return ()
    close = close[np.argsort(-cosines[close], kind="stable")[:limit]]
    ids = [int(image_ids[row]) for row in close]
    copies = []
    for image_id, png in read_thumbnails(ids).items():
        try:
            signature = content_signature(thumbnail_pixels(png))
        except ValueError:
            continue  # a damaged thumbnail says nothing about the content
        if float(signature @ query_signature) >= correlation:
            copies.append(int(image_id))
    return tuple(sorted(copies))
