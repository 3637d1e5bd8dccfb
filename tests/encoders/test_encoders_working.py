"""Preprocessing from ingest's working resolution (an image box-reduced before the encoder's own
resize) against the encoders' full-resolution preprocessing, which test_encoders_chexzero.py holds
to CheXzero's own steps pixel for pixel.

The tolerance is stated on what the model sees and what it returns: CheXzero's 8-bit 320 x 320
canvas within a few grey levels (mean under half a level), and the embedding of the working input
within cosine 0.999 of the full-resolution one, for the CheXzero architecture and the phantom model.
The image is RG1 (pydicom-data's 1955 x 1841 CR): real anatomy, lead markers, sharp edges.
"""

from __future__ import annotations

import numpy as np
import pytest

from chexretrieve.dicom import pydicom_test_file, read_radiograph
from chexretrieve.encoders import EncoderConfig, load_encoder
from chexretrieve.encoders.chexzero import pad_to_square

#: CheXzero's canvas from a working image against the full-resolution canvas, in grey levels
#: (measured on RG1 at 1/4: max 5, mean 0.27)
CANVAS_MAX, CANVAS_MEAN = 8, 0.5
#: embeddings of the working input against the full-resolution input (measured on RG1: CheXzero
#: architecture 0.999997, phantom 0.99985)
MIN_COSINE = 0.999


def block_mean(values: np.ndarray, factor: int) -> np.ndarray:
    """The working image: mean of each factor x factor block (edge blocks over what they hold)."""
    rows, columns = values.shape
    padded = np.zeros((-(-rows // factor) * factor, -(-columns // factor) * factor))
    counts = np.zeros_like(padded)
    padded[:rows, :columns], counts[:rows, :columns] = values, 1
    shape = (padded.shape[0] // factor, factor, padded.shape[1] // factor, factor)
    return (padded.reshape(shape).sum((1, 3)) / counts.reshape(shape).sum((1, 3))).astype(
        np.float32
    )


@pytest.fixture(scope="module")
def rg1():
    return read_radiograph(pydicom_test_file("RG1_UNCI.dcm")).pixels


@pytest.fixture(scope="module", params=["chexzero", "phantom"])
def encoder(request, chexzero_checkpoint):
    if request.param == "phantom":
        return load_encoder("phantom", EncoderConfig(device="cpu"))
    return load_encoder(f"chexzero:{chexzero_checkpoint}", EncoderConfig(device="cpu"))


def test_chexzero_canvas_from_a_working_image(rg1):
    scale = max(rg1.shape) // 480  # chexzero.WORKING_GAP x 320
    assert scale == 4
    working = np.rint(block_mean(rg1, scale) * 255).astype(np.uint8)
    fast = pad_to_square(working, source_shape=rg1.shape, scale=scale).astype(int)
    exact = pad_to_square(np.rint(rg1 * 255).astype(np.uint8)).astype(int)
    # the geometry is CheXzero's: int(1841 * 320 / 1955) = 301 columns, centred, zeros beside
    left = (320 - 301) // 2
    for canvas in (fast, exact):
        assert not canvas[:, :left].any() and not canvas[:, left + 301 :].any()
        assert canvas[:, left].any() and canvas[:, left + 300].any()
    difference = np.abs(fast - exact)
    assert difference.max() <= CANVAS_MAX and difference.mean() <= CANVAS_MEAN, (
        difference.max(),
        difference.mean(),
    )


def test_working_input_embeds_like_the_full_input(encoder, rg1):
    preprocess = encoder.image_preprocessor()
    scale = max(rg1.shape) // preprocess.working_side
    assert scale >= 2
    working = block_mean(rg1, scale)
    full = encoder.embed_preprocessed(np.stack([preprocess(rg1)]))
    fast = encoder.embed_preprocessed(
        np.stack([preprocess.from_working(working, rg1.shape, scale)])
    )
    assert float((full * fast).sum()) >= MIN_COSINE
    # the check can fail: another image's input is far away
    other = encoder.embed_preprocessed(np.stack([preprocess(np.flipud(rg1).copy())]))
    assert float((full * other).sum()) < MIN_COSINE


def test_scale_one_is_the_full_preprocessing_bit_for_bit(encoder, rg1):
    preprocess = encoder.image_preprocessor()
    crop = rg1[:300, :280]
    np.testing.assert_array_equal(preprocess.from_working(crop, crop.shape, 1), preprocess(crop))
