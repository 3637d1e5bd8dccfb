"""What the evaluation's embedding caches are keyed on: every input their content depends on.

An embedding cache entry is a function of (the pixels or texts embedded, the encoder's weights and
its preprocessing code). Settings name the pixels only as long as the code that draws them does
not change, so each key also carries *behavioural* fingerprints, computed cheaply on every run:

* :func:`encoder_fingerprint`: the sha256 of the encoder's weights file (the full hash, not the
  12 characters of its id) plus the hash of its embeddings of two fixed probe images (and, with
  ``texts=True``, of two probe sentences), rounded to 4 decimals: a change of preprocessing code,
  of a separately packaged text tower or of the weights changes it.
* :func:`phantom_generator_fingerprint`: ``RENDER_VERSION`` plus the hash of the first cases'
  pixels and reports of the world at the given settings (the generator's own fingerprint,
  :func:`chexretrieve.phantom.splits.generator_fingerprint`), so a generator change that forgot
  to bump ``RENDER_VERSION`` still misses.
* :func:`pixels_digest`: the hash of a list of images (the decoded pydicom-data files and
  photographs, the shifted renders of a probe phantom).

:func:`cache_key` hashes a JSON object of named inputs; the density evaluation and the phantom
source build theirs from these parts (``tests/evaluation/test_cache_keys.py`` changes each input
and sees a miss).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

#: rounding of the probe embeddings before hashing (float noise below it never changes a key)
PROBE_DECIMALS = 4
#: phantom cases of the world hashed by the generator fingerprint
GENERATOR_PROBE_CASES = 4
#: the probe sentences of a text fingerprint
PROBE_TEXTS = ("Small left pleural effusion.", "No acute cardiopulmonary process.")


def cache_key(kind: str, inputs: Mapping[str, object]) -> str:
    """``KIND-<20 hex>``: sha256 of the canonical JSON of ``inputs`` (sorted keys)."""
    text = json.dumps(dict(inputs), sort_keys=True, default=str, separators=(",", ":"))
    return f"{kind}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:20]}"


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def encoder_weights_hash(encoder) -> str:
    """The sha256 of the encoder's weights file (``source`` or ``checkpoint``), else its id."""
    for name in ("source", "checkpoint"):
        path = getattr(encoder, name, None)
        if path is not None and Path(path).is_file():
            return "sha256:" + file_sha256(path)
    return str(encoder.encoder_id)


def probe_images(size: int = 96) -> list[np.ndarray]:
    """Two fixed greyscale images in [0, 1]: a radial ramp and a checker of soft disks."""
    y, x = np.mgrid[0:size, 0:size] / (size - 1)
    ramp = np.clip(1.0 - np.hypot(x - 0.45, y - 0.55), 0, 1)
    disks = 0.5 + 0.4 * np.sin(9 * x) * np.cos(7 * y)
    return [ramp.astype(np.float32), disks.astype(np.float32)]


def _rounded_digest(matrix) -> str:
    values = np.round(np.asarray(matrix, dtype=np.float64), PROBE_DECIMALS) + 0.0  # no -0.0
    return hashlib.sha256(values.tobytes()).hexdigest()[:16]


def image_probe(encoder) -> str:
    """Hash of the encoder's embeddings of :func:`probe_images` (weights and preprocessing)."""
    return _rounded_digest(encoder.embed_images(probe_images()))


def text_probe(encoder) -> str:
    """Hash of the encoder's embeddings of ``PROBE_TEXTS`` (tokenizer, text tower, projection)."""
    return _rounded_digest(encoder.embed_texts(list(PROBE_TEXTS)))


def encoder_fingerprint(encoder, texts: bool = False) -> dict[str, str]:
    """{id, weights, image probe[, text probe]}: what an encoder's embeddings depend on."""
    out = {
        "id": str(encoder.encoder_id),
        "weights": encoder_weights_hash(encoder),
        "image_probe": image_probe(encoder),
    }
    if texts:
        out["text_probe"] = text_probe(encoder)
    return out


def pixels_digest(images: Iterable[np.ndarray]) -> str:
    """sha256 of the images' shapes and float32 pixels, in order."""
    digest = hashlib.sha256()
    for image in images:
        array = np.ascontiguousarray(image, dtype=np.float32)
        digest.update(str(array.shape).encode())
        digest.update(array.tobytes())
    return digest.hexdigest()[:20]


def phantom_generator_fingerprint(seed: int, config=None) -> dict[str, object]:
    """{render_version, generator}: ``RENDER_VERSION`` and the hash of the first cases of world
    ``seed`` drawn with ``config`` (pixels and reports)."""
    from chexretrieve.phantom import PhantomConfig, generate_case
    from chexretrieve.phantom.config import RENDER_VERSION
    from chexretrieve.phantom.splits import generator_fingerprint

    config = config or PhantomConfig()
    cases = [generate_case(int(seed), i, config) for i in range(GENERATOR_PROBE_CASES)]
    return {"render_version": RENDER_VERSION, "generator": generator_fingerprint(cases)}
