"""Windowing for the compare viewer: pixel values read in their own units with the file's default
window, and the DICOM linear VOI function checked against a naive transcription of PS3.3
C.11.2.1.2 written out here (not against the code under test)."""

from __future__ import annotations

import numpy as np
import pytest

from chexretrieve.dicom import linear_window, read_pixel_values, read_radiograph
from chexretrieve.dicom.write import derive_uid, write_radiograph
from chexretrieve.ui.viewer import DEFAULT_PRESET, preset_window


def naive_linear_voi(x: float, center: float, width: float) -> int:
    """DICOM PS3.3 C.11.2.1.2, linear function, output range 0..255, one value at a time:
    if x <= c - 0.5 - (w - 1) / 2, then y = ymin;
    else if x > c - 0.5 + (w - 1) / 2, then y = ymax;
    else y = ((x - (c - 0.5)) / (w - 1) + 0.5) * (ymax - ymin) + ymin;
    shown as the nearest grey level."""
    y_min, y_max = 0.0, 255.0
    if x <= center - 0.5 - (width - 1) / 2:
        y = y_min
    elif x > center - 0.5 + (width - 1) / 2:
        y = y_max
    else:
        y = ((x - (center - 0.5)) / (width - 1) + 0.5) * (y_max - y_min) + y_min
    return int(round(y))


@pytest.mark.parametrize(
    ("center", "width"),
    [(2048, 4096), (1000, 200), (40.5, 7), (3000, 1.5), (-200, 900), (0, 2)],
)
def test_linear_window_matches_the_standard_formula(center, width):
    values = np.arange(-1200, 4400, 3, dtype=np.float32).reshape(-1, 1)
    shown = linear_window(values, center, width)
    expected = [naive_linear_voi(float(x), center, width) for x in values.ravel()]
    assert shown.dtype == np.uint8
    assert shown.ravel().tolist() == expected
    inverted = linear_window(values, center, width, invert=True)
    assert inverted.ravel().tolist() == [255 - v for v in expected]


def test_a_width_of_one_is_a_threshold_and_below_one_is_refused():
    values = np.array([[99.0, 99.5, 100.0, 100.5]], dtype=np.float32)
    # c = 100, w = 1: x <= 99.5 is black, x > 99.5 is white
    assert linear_window(values, 100, 1).tolist() == [[0, 0, 255, 255]]
    for width in (0.5, 0, -3, float("nan")):
        with pytest.raises(ValueError, match="width|finite"):
            linear_window(values, 100, width)


def _write(path, values, photometric="MONOCHROME2", window=None):
    metadata = {
        "PatientID": "VIEW-TEST",
        "StudyInstanceUID": derive_uid("view", path.name, "study"),
        "SeriesInstanceUID": derive_uid("view", path.name, "series"),
        "SOPInstanceUID": derive_uid("view", path.name, "image"),
        "Modality": "DX",
    }
    write_radiograph(path, values, metadata, photometric=photometric)
    if window is not None:
        import pydicom

        ds = pydicom.dcmread(path)
        ds.WindowCenter, ds.WindowWidth = str(window[0]), str(window[1])
        ds.save_as(path)


def test_pixel_values_keep_the_stored_values_and_the_file_window(tmp_path):
    stored = np.tile(np.arange(0, 4000, 16, dtype=np.uint16), (40, 1))  # 40 x 250
    path = tmp_path / "ramp.dcm"
    _write(path, stored, window=(1500, 800))
    read = read_pixel_values(path)
    np.testing.assert_array_equal(read.values, stored.astype(np.float32))  # slope 1, intercept 0
    assert (read.default_center, read.default_width, read.window_source) == (
        1500.0,
        800.0,
        "DICOM window",
    )
    assert not read.invert and read.stored_shape == (40, 250)
    assert (read.low, read.high) == (0.0, float(stored.max()))
    # under its own window the viewer shows what ingest and the thumbnails show
    expected = np.array(
        [[naive_linear_voi(float(x), 1500, 800) for x in row] for row in stored[:2]]
    )
    np.testing.assert_array_equal(linear_window(read.values[:2], 1500, 800), expected)
    display = read_radiograph(path).pixels
    np.testing.assert_allclose(display[:2] * 255, expected, atol=1.0)


def test_monochrome1_is_shown_inverted_and_images_shrink_by_whole_blocks(tmp_path):
    values = np.zeros((64, 96), dtype=np.uint16)
    values[:, 48:] = 4000
    path = tmp_path / "mono1.dcm"
    _write(path, values, photometric="MONOCHROME1")
    read = read_pixel_values(path, max_side=40)
    assert read.invert  # the lowest stored value shows white
    assert read.values.shape == (22, 32)  # 96 / 3 = 32 columns: box average by a factor 3
    grey = linear_window(read.values, read.default_center, read.default_width, read.invert)
    display = read_radiograph(path).pixels  # ingest's display: 0 = black
    assert (grey[:, 0] > 200).all() == (display[:, 0] > 0.8).all()
    assert abs(int(grey[0, 0]) - round(float(display[0, 0]) * 255)) <= 1


def test_png_values_use_the_bit_depth_as_their_window(tmp_path):
    from PIL import Image

    pixels = np.tile(np.arange(256, dtype=np.uint8), (4, 1))
    path = tmp_path / "ramp.png"
    Image.fromarray(pixels).save(path)
    read = read_pixel_values(path)
    assert (read.default_center, read.default_width, read.window_source) == (
        128.0,
        256.0,
        "bit depth",
    )
    # c = 128, w = 256 shows an 8-bit image unchanged
    assert linear_window(read.values, 128, 256).tolist() == pixels.tolist()


def test_presets_are_percentile_windows_of_the_query_and_mirror_for_monochrome1(tmp_path):
    stored = np.arange(0, 4096, dtype=np.uint16).reshape(64, 64)
    plain, inverted = tmp_path / "m2.dcm", tmp_path / "m1.dcm"
    _write(plain, stored)
    _write(inverted, stored, photometric="MONOCHROME1")
    m2, m1 = read_pixel_values(plain), read_pixel_values(inverted)
    assert preset_window(m2, DEFAULT_PRESET) is None
    center, width = preset_window(m2, "lung")  # the darker part: percentiles 1..60
    low, high = np.percentile(m2.values, [1, 60])
    assert center == pytest.approx((low + high) / 2) and width == pytest.approx(high - low)
    center, width = preset_window(m1, "lung")  # low values show white: percentiles 40..99
    low, high = np.percentile(m1.values, [40, 99])
    assert center == pytest.approx((low + high) / 2) and width == pytest.approx(high - low)
    bone = preset_window(m2, "bone")
    lung = preset_window(m2, "lung")
    assert bone[0] > lung[0]  # bone sits in the brighter values of a MONOCHROME2 image
    with pytest.raises(ValueError, match="unknown window preset 'soft'"):
        preset_window(m2, "soft")
