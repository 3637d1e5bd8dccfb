"""What the evaluation's embedding caches are keyed on: every input their content depends on.

Two families of keys live here (made by two pieces of work of issue 32; both hold).

**Retrieval evaluation.** An entry of ``EmbeddingCache`` (``sources.py``) is named by a hash of
these strings, so a change of any of them is a cache miss, never a stale hit:

* ``encoder_inputs``: the encoder's id (a hash of its weights), its class and the code of its
  forward pass and preprocessing (``code_version``), the device kind and autocast setting it ran
  with (CUDA float16 gives other vectors than the CPU), the torch version, and for text the
  tokenizer (``text_fingerprint``) and the frozen text backbone (``text_backbone``) where the
  encoder has them;
* ``phantom_world_inputs``: the world seed and size, the validation-label rule, the generator's
  settings (``PhantomConfig``), ``RENDER_VERSION`` and the code of the generator and of the labels'
  derivation;
* ``image_file_inputs``: each file's path, size and modification time, the reader's settings and
  code.

``tests/evaluation/test_eval_cache_keys.py`` changes each input and checks that the entry misses.

**Density evaluation and behavioural fingerprints.**

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
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from chexretrieve.evaluation.code_version import (
    GENERATOR_MODULES,
    PHANTOM_ENCODER_MODULES,
    combined_fingerprint,
)

#: per encoder class module, the code its embeddings depend on (other chexretrieve encoders: their
#: own module plus the shared helpers; classes outside the package, such as test fakes: none)
_ENCODER_CODE: dict[str, tuple[str, ...]] = {
    "chexretrieve.encoders.phantom": PHANTOM_ENCODER_MODULES,
}
_SHARED_ENCODER_CODE = ("chexretrieve/encoders/base.py", "chexretrieve/encoders/device.py")
#: the code a phantom world's labels table depends on besides the generator
_LABEL_CODE = ("chexretrieve/evaluation/phantom_source.py", "chexretrieve/findings.py")
#: the code reading image files for the CheXpert-layout source
_READER_CODE = ("chexretrieve/dicom",)


def _encoder_code(encoder) -> tuple[str, ...]:
    module = type(encoder).__module__
    if module in _ENCODER_CODE:
        return _ENCODER_CODE[module]
    if module.startswith("chexretrieve."):
        own = module.replace(".", "/") + ".py"
        return (own, *_SHARED_ENCODER_CODE)
    return ()


def encoder_inputs(encoder) -> list[str]:
    """Everything an encoder's image embeddings depend on besides the images."""
    cls = type(encoder)
    device = getattr(encoder, "device", None)
    config = getattr(encoder, "config", None)
    torch = sys.modules.get("torch")
    return [
        f"encoder {encoder.encoder_id}",
        f"class {cls.__module__}.{cls.__qualname__}",
        f"code {combined_fingerprint(_encoder_code(encoder))}",
        f"device {getattr(device, 'type', device)}",
        f"autocast {getattr(config, 'use_autocast', None)}",
        f"torch {getattr(torch, '__version__', None)}",
    ]


def text_inputs(encoder) -> list[str]:
    """Everything an encoder's text embeddings depend on besides the sentences."""
    return encoder_inputs(encoder) + [
        f"tokenizer {getattr(encoder, 'text_fingerprint', None)}",
        f"text backbone {getattr(encoder, 'text_backbone', None)}",
    ]


def phantom_world_inputs(seed: int, n_images: int, validation_labels: str) -> list[str]:
    """Everything a phantom world's images and labels table depend on."""
    from chexretrieve.phantom import PhantomConfig
    from chexretrieve.phantom.config import RENDER_VERSION

    return [
        f"seed {seed}",
        f"images {n_images}",
        f"validation labels: {validation_labels}",
        repr(PhantomConfig()),
        f"render {RENDER_VERSION}",  # new pixels, new embeddings
        f"generator code {combined_fingerprint(GENERATOR_MODULES)}",
        f"labels code {combined_fingerprint(_LABEL_CODE)}",
    ]


def image_file_inputs(paths: Sequence[Path]) -> list[str]:
    """Each image file's path, size and modification time, and how files are read."""
    from chexretrieve.dicom import ReadConfig

    stamps = [f"{p}|{p.stat().st_size}|{p.stat().st_mtime_ns}" for p in paths]
    return stamps + [repr(ReadConfig()), f"reader code {combined_fingerprint(_READER_CODE)}"]


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
