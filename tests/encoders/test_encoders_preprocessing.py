"""Encoders that offer their image preprocessing apart from the model (ingest runs it in its
decoding workers): the split gives exactly ``embed_images``, and the preprocessor pickles."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from chexretrieve.encoders import load_encoder
from chexretrieve.encoders.base import split_preprocessing
from chexretrieve.encoders.config import EncoderConfig


@pytest.fixture(scope="module", params=["chexzero", "phantom"])
def encoder(request, chexzero_checkpoint):
    if request.param == "phantom":
        return load_encoder("phantom", EncoderConfig(device="cpu"))
    return load_encoder(f"chexzero:{chexzero_checkpoint}", EncoderConfig(device="cpu"))


def test_split_preprocessing_gives_embed_images(encoder):
    rng = np.random.default_rng(11)
    images = [rng.random(shape, dtype=np.float32) for shape in [(90, 70), (64, 64), (30, 120)]]
    preprocess, embed = split_preprocessing(encoder)
    shipped = pickle.loads(pickle.dumps(preprocess))  # what a decoding worker receives
    inputs = np.stack([shipped(image) for image in images])
    assert inputs.dtype == np.float32 and inputs.ndim == 4
    np.testing.assert_array_equal(embed(inputs), encoder.embed_images(images))
    with pytest.raises(ValueError, match="preprocessed inputs have shape"):
        embed(inputs[:, :, :-1])
    with pytest.raises(ValueError, match="2-D greyscale"):
        shipped(np.zeros((4, 4, 3), np.float32))


def test_encoders_without_a_split_say_so():
    from chexretrieve.encoders.stand_in import StandInEncoder

    assert split_preprocessing(StandInEncoder(dim=8)) is None
