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


def _with_voi_lut(path, first, lut, keep_window=False):
    """Give a written file a VOI LUT Sequence (LUT Data ``lut`` from input ``first``), and unless
    ``keep_window`` remove its Window Center / Width so the LUT is the file's only VOI."""
    import pydicom
    from pydicom.dataset import Dataset
    from pydicom.sequence import Sequence

    ds = pydicom.dcmread(path)
    item = Dataset()
    item.LUTDescriptor = [len(lut), first, 16]
    item.add_new(0x00283006, "US", [int(v) for v in lut])  # LUT Data
    ds.VOILUTSequence = Sequence([item])
    if not keep_window:
        for keyword in ("WindowCenter", "WindowWidth", "VOILUTFunction"):
            if keyword in ds:
                delattr(ds, keyword)
    ds.save_as(path)


def test_a_file_with_only_a_voi_lut_opens_on_the_range_where_its_lut_rises(tmp_path):
    stored = np.tile(np.arange(0, 4000, 8, dtype=np.uint16), (8, 1))  # 8 x 500, 0..3992
    path = tmp_path / "lut-only.dcm"
    _write(path, stored)
    # inputs 1000..2999: 0 up to 1200, then +100 per value, 60000 from 1800 on
    inputs = np.arange(1000, 3000)
    _with_voi_lut(path, 1000, np.clip((inputs - 1200) * 100, 0, 60000))
    read = read_pixel_values(path)
    # by hand: the last input at the lowest output is 1200, the first at the highest 1800, so
    # c = (1200 + 1800 + 1) / 2 and w = 1800 - 1200 + 1
    assert (read.default_center, read.default_width, read.window_source) == (
        1500.5,
        601.0,
        "VOI LUT range",
    )
    assert naive_linear_voi(1200, 1500.5, 601) == 0 and naive_linear_voi(1800, 1500.5, 601) == 255
    # the viewer's default and ingest's LUT display agree where the LUT is flat
    grey = linear_window(read.values, read.default_center, read.default_width)
    display = read_radiograph(path).pixels
    flat_low, flat_high = stored <= 1200, stored >= 1800
    assert (grey[flat_low] == 0).all() and (display[flat_low] == 0).all()
    assert (grey[flat_high] == 255).all() and (display[flat_high] == 1).all()


def test_pydicom_s_lut_test_file_opens_on_its_lut_range():
    """vlut_04.dcm (pydicom's test data: an 8-bit image with a 256-entry VOI LUT and no window),
    with the window worked out here from pydicom's own apply_voi one input at a time."""
    import pydicom
    from pydicom.data import get_testdata_file
    from pydicom.pixels.processing import apply_voi

    from chexretrieve.dicom.config import ReadConfig

    path = get_testdata_file("vlut_04.dcm")
    ds = pydicom.dcmread(path)
    count, first = (
        int(ds.VOILUTSequence[0].LUTDescriptor[0]),
        int(ds.VOILUTSequence[0].LUTDescriptor[1]),
    )
    outputs = [float(apply_voi(np.array([x]), ds, index=0)[0]) for x in range(first, first + count)]
    lowest, highest = min(outputs), max(outputs)
    lo = first + max(next(i for i, y in enumerate(outputs) if y > lowest) - 1, 0)
    hi = first + next(i for i, y in enumerate(outputs) if y == highest)
    read = read_pixel_values(path, ReadConfig(allowed_modalities=("CR", "DX", "OT")))
    assert read.window_source == "VOI LUT range"
    assert (read.default_center, read.default_width) == ((lo + hi + 1) / 2, hi - lo + 1)


def test_the_dicom_window_wins_over_a_lut_and_a_flat_lut_opens_on_the_value_range(tmp_path):
    stored = np.tile(np.arange(0, 4000, 8, dtype=np.uint16), (8, 1))
    both = tmp_path / "both.dcm"
    _write(both, stored, window=(1500, 800))
    _with_voi_lut(both, 0, np.arange(4096) * 16, keep_window=True)
    assert read_pixel_values(both).window_source == "DICOM window"
    flat = tmp_path / "flat.dcm"
    _write(flat, stored)
    _with_voi_lut(flat, 0, np.full(4096, 500))
    read = read_pixel_values(flat)
    assert read.window_source == "value range"
    assert (read.default_center, read.default_width) == ((0 + 3992 + 1) / 2, 3992 + 1)
