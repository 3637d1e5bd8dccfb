"""Reading at working resolution (ingest): one decode, box-reduced, then displayed; and the reduced
codec decode (JPEG DCT scaling, JPEG 2000 levels) against a full decode followed by the same
reduction, for every transfer syntax an archive holds.

References are independent of the code under test: the full-resolution display comes from
``read_radiograph`` (the reader of record), the reduction from a naive numpy block mean written
here, and the images are a crop of RG1 (a real CR from pydicom-data) written in each syntax.
"""

from __future__ import annotations

import numpy as np
import pytest

from chexretrieve.dicom import ReadConfig, pydicom_test_file, read_radiograph
from chexretrieve.dicom.samples import SAMPLE_SYNTAXES, write_jpeg_file, write_sample
from chexretrieve.dicom.working import box_reduce, read_working_radiograph, working_scale
from chexretrieve.dicom.write import derive_uid

#: the working side of the tests: RG1's crop (1024 x 960) is reduced 4 times by the box path, and
#: the codecs reach 1/4 (DCT scaling, two wavelet levels)
SIDE = 250
#: display values after the reduction, in grey levels of 255, for lossless syntaxes whose window
#: spans the stored range: the display transform is linear there, so reducing first changes only
#: the rounding of the block means to stored integers
LOSSLESS_MAX = 0.02
#: the reduced codec decode against full decode then block mean, in grey levels of 255: libjpeg's
#: scaled IDCT and the JPEG 2000 5/3 low-pass band are not plain block means (measured on RG1:
#: on this crop at 1/4: JPEG mean 0.25, 99th percentile 0.56; JPEG 2000 mean 1.56, 99th percentile
#: 7.3, 22 at the sharpest edges)
REDUCED_MEAN = 2.0
REDUCED_P99 = 10.0


def naive_block_mean(values: np.ndarray, factor: int) -> np.ndarray:
    """Mean of each factor x factor block; edge blocks over the pixels they hold (float64)."""
    rows, columns = values.shape
    out = np.zeros((-(-rows // factor), -(-columns // factor)))
    for i in range(out.shape[0]):
        for j in range(out.shape[1]):
            out[i, j] = values[i * factor : (i + 1) * factor, j * factor : (j + 1) * factor].mean()
    return out


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.int16, np.float32, np.int32])
@pytest.mark.parametrize(("shape", "factor"), [((37, 41), 4), ((64, 48), 8), ((9, 7), 3)])
def test_box_reduce_is_the_block_mean(dtype, shape, factor):
    rng = np.random.default_rng(factor)
    info = np.finfo(dtype) if np.dtype(dtype).kind == "f" else np.iinfo(dtype)
    low, high = (0.0, 1.0) if np.dtype(dtype).kind == "f" else (max(info.min, -30000), 30000)
    values = rng.uniform(low, min(high, info.max), shape).astype(dtype)
    reduced = box_reduce(values, factor)
    reference = naive_block_mean(values.astype(np.float64), factor)
    assert reduced.dtype == values.dtype and reduced.shape == reference.shape
    tolerance = 1e-5 if np.dtype(dtype).kind == "f" else 0.5 + 1e-9  # integers: rounded
    assert np.abs(reduced.astype(np.float64) - reference).max() <= tolerance
    assert box_reduce(values, 1) is values


def test_working_scale_keeps_the_long_side():
    assert working_scale(1955, 1841, 480) == 4  # 489 >= 480
    assert working_scale(320, 320, 480) == 1
    assert working_scale(3000, 2500, 0) == 1


@pytest.fixture(scope="module")
def rg1_files(tmp_path_factory):
    """A 1024 x 960 crop of RG1 (15 bits) in every syntax, and as an 8-bit JPEG file."""
    folder = tmp_path_factory.mktemp("rg1-syntaxes")
    source = read_radiograph(pydicom_test_file("RG1_UNCI.dcm"), ReadConfig())
    crop = source.pixels[400:1424, 400:1360]
    stored = np.round(crop * 32767).astype(np.uint16)
    metadata = {
        "PatientID": "WORKING",
        "StudyInstanceUID": derive_uid("working", "study"),
        "SeriesInstanceUID": derive_uid("working", "series"),
        "SOPInstanceUID": derive_uid("working", "sop"),
        "Modality": "CR",
    }
    files = {s: write_sample(folder / f"{s}.dcm", stored, s, metadata) for s in SAMPLE_SYNTAXES}
    files["monochrome1-rle"] = write_sample(
        folder / "m1.dcm", stored, "rle", metadata, photometric="MONOCHROME1"
    )
    files["jpeg-file"] = write_jpeg_file(folder / "rg1.jpg", np.rint(crop * 255).astype(np.uint8))
    return files


ALL = [*SAMPLE_SYNTAXES, "monochrome1-rle", "jpeg-file"]


@pytest.mark.parametrize("syntax", ALL)
def test_working_read_is_the_full_read_reduced(rg1_files, syntax):
    path = rg1_files[syntax]
    full = read_radiograph(path)
    working = read_working_radiograph(path, working_side=SIDE)
    assert working.scale == 4 and working.pixels.dtype == np.float32
    assert (working.metadata.rows, working.metadata.columns) == full.pixels.shape
    assert working.pixel_sha256 == full.pixel_sha256  # the identity of the full image
    assert working.metadata.sop_uid == full.metadata.sop_uid
    reference = naive_block_mean(full.pixels.astype(np.float64), 4)
    difference = np.abs(working.pixels - reference) * 255
    lossy = syntax in ("jpeg-baseline", "jpeg-file")  # 8-bit: the block mean rounds to a level
    assert difference.max() <= (0.5 + 1e-3 if lossy else LOSSLESS_MAX), difference.max()
    assert working.pixels.min() >= 0 and working.pixels.max() <= 1


def test_the_full_resolution_is_read_when_no_working_side_is_given(rg1_files):
    path = rg1_files["native"]
    working = read_working_radiograph(path, working_side=0)
    full = read_radiograph(path)
    assert working.scale == 1
    np.testing.assert_array_equal(working.pixels, full.pixels)


@pytest.mark.parametrize("syntax", ["jpeg-baseline", "jpeg-file", "jpeg2000"])
def test_reduced_codec_decode_is_full_decode_then_reduce(rg1_files, syntax):
    path = rg1_files[syntax]
    full = read_radiograph(path)
    reduced = read_working_radiograph(path, working_side=SIDE, codec="reduced")
    assert reduced.scale == 4, reduced.warnings  # the codec itself stopped at 1/4
    assert not any("reduced decode" in note for note in reduced.warnings)
    reference = naive_block_mean(full.pixels.astype(np.float64), 4)
    assert reduced.pixels.shape == reference.shape
    difference = np.abs(reduced.pixels - reference) * 255
    assert difference.mean() <= REDUCED_MEAN, difference.mean()
    assert np.percentile(difference, 99) <= REDUCED_P99, np.percentile(difference, 99)
    # identity from the compressed data: stable, and not the full image's pixel hash
    again = read_working_radiograph(path, working_side=SIDE, codec="reduced")
    assert again.pixel_sha256 == reduced.pixel_sha256 != full.pixel_sha256


@pytest.mark.parametrize("syntax", ["native", "rle", "jpeg-lossless", "monochrome1-rle"])
def test_reduced_codec_leaves_other_syntaxes_to_the_full_decode(rg1_files, syntax):
    path = rg1_files[syntax]
    reduced = read_working_radiograph(path, working_side=SIDE, codec="reduced")
    working = read_working_radiograph(path, working_side=SIDE)
    assert reduced.pixel_sha256 == working.pixel_sha256 == read_radiograph(path).pixel_sha256
    np.testing.assert_array_equal(reduced.pixels, working.pixels)


def test_fastest_jpeg_decoder_gives_the_values_of_gdcm(rg1_files):
    """Pillow (preferred for JPEG Baseline) and gdcm (pydicom's first choice) agree exactly on
    the sample, so the pixel hash of a JPEG DICOM file did not change with the preference."""
    path = rg1_files["jpeg-baseline"]
    fast = read_radiograph(path)
    gdcm = read_radiograph(path, ReadConfig(decoding_plugins=("gdcm",)))
    assert fast.pixel_sha256 == gdcm.pixel_sha256
