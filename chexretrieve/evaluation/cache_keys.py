"""What the evaluation's embedding caches are keyed by: every input their content depends on.

An entry of ``EmbeddingCache`` (``sources.py``) is named by a hash of these strings, so a change of
any of them is a cache miss, never a stale hit:

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
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

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
