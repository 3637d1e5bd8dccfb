"""A real-size CheXzero checkpoint gives open_clip's ViT-B-32-quickgelu results, exactly.

open_clip (in a subprocess, see open_clip_reference.py) builds its ViT-B-32-quickgelu with random
weights and saves the state dict as CheXzero's training code does; we load that file through
``chexzero:CHECKPOINT?tokenizer=bpe_simple_vocab_16e6.txt.gz`` (OpenAI's real vocabulary, shipped
in open_clip_torch) and compare, for 55 varied clinical sentences and 4 images:

- token ids: equal to open_clip's tokenizer, padded to 77;
- text embeddings and image embeddings: within 1e-5 relative (L2) of open_clip's, normalised.

Both models get the same pixel tensor (CheXzero's preprocessing, which tests/encoders/
test_encoders_chexzero.py checks against a transcription of CheXzero's code); this test checks
the model and the tokenizer, not the preprocessing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from encoder_builders import VARIED_SENTENCES

from chexretrieve.encoders import load_encoder
from chexretrieve.encoders.chexzero import preprocess_chexzero

REFERENCE_SCRIPT = Path(__file__).with_name("open_clip_reference.py")
TOLERANCE = 1e-5


def _relative_errors(ours: np.ndarray, reference: np.ndarray) -> np.ndarray:
    reference = reference / np.linalg.norm(reference, axis=1, keepdims=True)
    return np.linalg.norm(ours - reference, axis=1) / np.linalg.norm(reference, axis=1)


@pytest.mark.slow
def test_chexzero_checkpoint_equals_open_clip_vit_b_32_quickgelu(tmp_path) -> None:
    import importlib.util

    spec = importlib.util.find_spec("open_clip")
    if spec is None:
        pytest.fail("the reference is missing: make setup (pip install --no-deps open_clip_torch)")
    vocabulary = Path(spec.submodule_search_locations[0]) / "bpe_simple_vocab_16e6.txt.gz"

    rng = np.random.default_rng(3)
    images = [rng.random(shape, dtype=np.float32) for shape in [(320, 320), (2139, 1711),
                                                                 (500, 700), (64, 90)]]  # fmt: skip
    pixels = np.stack([preprocess_chexzero(image, 224).numpy() for image in images])
    np.save(tmp_path / "pixels.npy", pixels)
    assert len(VARIED_SENTENCES) >= 50
    (tmp_path / "texts.json").write_text(json.dumps(VARIED_SENTENCES), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(REFERENCE_SCRIPT), str(tmp_path)],
        capture_output=True, text=True, timeout=1800, env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    reference = np.load(tmp_path / "reference.npz")

    encoder = load_encoder(f"chexzero:{tmp_path / 'checkpoint.pt'}?tokenizer={vocabulary}", "cpu")
    assert encoder.sizes.vision_layers == 12 and encoder.embed_dim == 512
    assert encoder.sizes.vocab_size == 49408 and encoder.sizes.patch_size == 32

    ids, _ = encoder.tokenizer.encode_batch(VARIED_SENTENCES, 77)
    padded = np.zeros((len(VARIED_SENTENCES), 77), dtype=np.int64)
    padded[:, : ids.shape[1]] = ids
    np.testing.assert_array_equal(padded, reference["ids"])

    text_errors = _relative_errors(encoder.embed_texts(VARIED_SENTENCES), reference["text"])
    image_errors = _relative_errors(encoder.embed_images(images), reference["image"])
    print(f"max relative error: text {text_errors.max():.2e}, image {image_errors.max():.2e}")
    assert text_errors.max() <= TOLERANCE, text_errors.max()
    assert image_errors.max() <= TOLERANCE, image_errors.max()
    np.testing.assert_array_equal(encoder.embed_images(images), encoder.embed_preprocessed(pixels))
