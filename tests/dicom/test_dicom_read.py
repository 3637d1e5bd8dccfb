"""chexretrieve.dicom: decoding, display values, metadata, PNG/JPEG, text fields."""

from __future__ import annotations

import datetime as dt
import hashlib
import importlib.util
import pickle
import subprocess
import sys

import numpy as np
import pydicom
import pytest
from dicom_read_factory import (
    SOP_UID,
    STUDY_UID,
    radiograph_dataset,
    stored_values,
    write,
)
from PIL import Image
from pydicom.data import get_testdata_file
from pydicom.dataset import Dataset
from pydicom.sequence import Sequence
from pydicom.uid import (
    DeflatedExplicitVRLittleEndian,
    ImplicitVRLittleEndian,
    JPEG2000Lossless,
    RLELossless,
)

from chexretrieve.dicom import (
    REJECTION_REASONS,
    ReadConfig,
    RejectedFile,
    list_text_fields,
    parse_age_string,
    parse_date,
    pydicom_test_file,
    read_dicom_header,
    read_radiograph,
    render_for_display,
)

ADMIT_ALL = ReadConfig(allowed_modalities=None)


def naive_sha256(values: np.ndarray) -> str:
    little = values.astype(values.dtype.newbyteorder("<"))
    shape = "x".join(str(n) for n in little.shape)
    return hashlib.sha256(f"{little.dtype.str}|{shape}|".encode() + little.tobytes()).hexdigest()


# ---------------------------------------------------------------------------------- basics


def test_generated_cr_reads_with_metadata_hash_and_minmax_pixels(tmp_path):
    values = stored_values(64, 48, 12, seed=3)
    path = write(radiograph_dataset(values=values), tmp_path / "cr.dcm")
    rad = read_radiograph(path, ReadConfig())
    meta = rad.metadata
    assert (meta.study_uid, meta.sop_uid, meta.patient_id) == (STUDY_UID, SOP_UID, "PAT-001")
    assert (meta.patient_sex, meta.patient_age_years, meta.view_position) == ("F", 65.0, "PA")
    assert meta.study_date == dt.date(2004, 8, 26)
    assert (meta.manufacturer, meta.body_part, meta.modality) == ("Test Vendor", "CHEST", "CR")
    assert (meta.rows, meta.columns, meta.photometric) == (64, 48, "MONOCHROME2")
    assert meta.pixel_spacing == (0.15, 0.16)
    assert (meta.transfer_syntax, meta.source_format) == ("1.2.840.10008.1.2.1", "dicom")
    assert rad.pixels.dtype == np.float32 and rad.pixels.shape == (64, 48)
    # no window: min-max of the stored values
    expected = (values - values.min()) / (values.max() - values.min())
    np.testing.assert_allclose(rad.pixels, expected, atol=1e-6)
    assert rad.pixel_sha256 == naive_sha256(values)
    assert meta.to_dict()["study_date"] == "2004-08-26"


def test_window_and_rescale_match_a_plain_restatement(tmp_path):
    values = stored_values(40, 30, 12, seed=1)
    ds = radiograph_dataset(40, 30, values=values)
    ds.RescaleSlope, ds.RescaleIntercept = 2, -100
    ds.WindowCenter, ds.WindowWidth = 3000, 4001
    rad = read_radiograph(write(ds, tmp_path / "w.dcm"))
    # DICOM PS3.3 C.11.2.1.2 linear window, then divided by the output range
    x = values * 2.0 - 100
    c, w = 3000 - 0.5, 4001 - 1
    expected = np.clip((x - c) / w + 0.5, 0, 1)
    np.testing.assert_allclose(rad.pixels, expected, atol=1e-5)


def test_voi_lut_sequence_is_applied(tmp_path):
    values = stored_values(20, 20, 8, seed=2)
    ds = radiograph_dataset(20, 20, bits_stored=8, values=values)
    item = Dataset()
    item.LUTDescriptor = [256, 0, 16]
    lut = (np.arange(256) ** 2).astype(np.uint16)  # a non-linear LUT, max 65025
    item.add_new(0x00283006, "US", lut.tolist())  # LUT Data
    ds.VOILUTSequence = Sequence([item])
    rad = read_radiograph(write(ds, tmp_path / "voi.dcm"))
    np.testing.assert_allclose(rad.pixels, lut[values] / lut.max(), atol=1e-6)


def test_bad_window_falls_back_to_minmax_with_a_note(tmp_path):
    ds = radiograph_dataset()
    ds.WindowCenter, ds.WindowWidth = 100, 0  # width 0 is invalid for LINEAR
    rad = read_radiograph(write(ds, tmp_path / "badwin.dcm"))
    assert rad.pixels.min() == 0.0 and rad.pixels.max() == 1.0
    assert any("Window Center/Width not applied" in note for note in rad.warnings)


def test_monochrome1_and_its_inverted_monochrome2_twin_look_alike(tmp_path):
    values = stored_values(50, 40, 12, seed=5)
    mono1 = radiograph_dataset(50, 40, values=values, photometric="MONOCHROME1")
    mono2 = radiograph_dataset(50, 40, values=4095 - values, photometric="MONOCHROME2")
    a = read_radiograph(write(mono1, tmp_path / "m1.dcm")).pixels
    b = read_radiograph(write(mono2, tmp_path / "m2.dcm")).pixels
    np.testing.assert_allclose(a, b, atol=1e-6)
    mono1.WindowCenter, mono1.WindowWidth = 1500, 2000
    mono2.WindowCenter, mono2.WindowWidth = 4095 - 1500, 2000
    a = read_radiograph(write(mono1, tmp_path / "m1w.dcm")).pixels
    b = read_radiograph(write(mono2, tmp_path / "m2w.dcm")).pixels
    assert np.abs(a - b).max() <= 1.5 / 1999  # the LINEAR formula's half-step asymmetry
    assert a.mean() > 0.2 and a.std() > 0.05  # not a blank image


def test_bits_above_bits_stored_are_ignored(tmp_path):
    values = stored_values(32, 32, 12, seed=4)
    dirty = values | np.uint16(0xA000)  # garbage in the 4 unused high bits
    clean = read_radiograph(write(radiograph_dataset(32, 32, values=values), tmp_path / "c.dcm"))
    messy = read_radiograph(write(radiograph_dataset(32, 32, values=dirty), tmp_path / "d.dcm"))
    assert messy.pixel_sha256 == clean.pixel_sha256
    np.testing.assert_array_equal(messy.pixels, clean.pixels)


# ---------------------------------------------------------------------------------- codecs


@pytest.mark.parametrize("syntax", [RLELossless, JPEG2000Lossless, DeflatedExplicitVRLittleEndian,
                                    ImplicitVRLittleEndian])  # fmt: skip
def test_generated_encodings_decode_pixel_identical(tmp_path, syntax):
    ds = radiograph_dataset(seed=7)
    plain = read_radiograph(write(ds, tmp_path / "plain.dcm"))
    other = read_radiograph(write(ds, tmp_path / "other.dcm", syntax))
    assert other.metadata.transfer_syntax == str(syntax)
    assert other.pixel_sha256 == plain.pixel_sha256
    np.testing.assert_array_equal(other.pixels, plain.pixels)


@pytest.mark.parametrize(
    "twin",
    ["MR_small_RLE.dcm", "MR_small_bigendian.dcm", "MR_small_implicit.dcm",
     "MR_small_jp2klossless.dcm", "MR_small_jpeg_ls_lossless.dcm", "MR_small_expb.dcm"],
)  # fmt: skip
def test_pydicom_mr_twins_decode_pixel_identical(twin):
    plain = read_radiograph(get_testdata_file("MR_small.dcm"), ADMIT_ALL)
    other = read_radiograph(get_testdata_file(twin), ADMIT_ALL)
    assert other.pixel_sha256 == plain.pixel_sha256
    np.testing.assert_array_equal(other.pixels, plain.pixels)


@pytest.mark.parametrize(
    "name",
    ["JPEG-LL.dcm", "JPGLosslessP14SV1_1s_1f_8b.dcm", "JPEG2000.dcm", "image_dfl.dcm",
     "693_J2KR.dcm"],
)  # fmt: skip
def test_other_shipped_encodings_decode_like_pydicom(name):
    path = get_testdata_file(name)
    rad = read_radiograph(path, ADMIT_ALL)
    reference = pydicom.dcmread(path).pixel_array
    assert rad.pixel_sha256 == naive_sha256(reference)
    assert rad.pixels.shape == reference.shape and np.isfinite(rad.pixels).all()


def test_rg1_chest_radiograph_in_four_encodings():
    rads = {n: read_radiograph(get_testdata_file(f"RG1_{n}.dcm")) for n in ("UNCI", "J2KI", "UNCR",
                                                                          "J2KR")}  # fmt: skip
    # J2KR is lossless, J2KI lossy; each UNC* file is the decompressed twin of its J2K* file
    assert rads["J2KR"].pixel_sha256 == rads["UNCR"].pixel_sha256
    assert rads["J2KI"].pixel_sha256 == rads["UNCI"].pixel_sha256
    np.testing.assert_array_equal(rads["J2KR"].pixels, rads["UNCR"].pixels)
    diff = np.abs(rads["J2KI"].pixels - rads["J2KR"].pixels)
    assert diff.max() < 0.05 and diff.mean() < 0.005  # 10:1 lossy JPEG 2000
    meta = rads["J2KR"].metadata
    assert (meta.photometric, meta.view_position, meta.modality) == ("MONOCHROME1", "PA", "CR")
    assert (meta.rows, meta.columns, meta.patient_sex, meta.body_part) == (1955, 1841, "F", "CHEST")
    # PatientAge absent: from birth 1940-03-05 to study 2004-08-26
    assert meta.patient_age_years == pytest.approx((dt.date(2004, 8, 26) - dt.date(1940, 3, 5)).days
                                                   / 365.25)  # fmt: skip
    assert meta.pixel_spacing is None  # stored as 0\0 = not calibrated
    # MONOCHROME1: the lungs (low attenuation, high stored values) must come out dark
    pixels = rads["J2KR"].pixels
    assert 0.0 <= pixels.min() and pixels.max() <= 1.0
    lung = pixels[700:1100, 350:650].mean()
    spine = pixels[700:1100, 880:960].mean()
    assert lung < spine


def test_twelve_bit_jpeg_needs_the_optional_gpl_codec():
    path = get_testdata_file("JPGExtended.dcm")
    if importlib.util.find_spec("libjpeg") is not None:  # the gpl-codecs extra is installed
        assert read_radiograph(path, ADMIT_ALL).pixels.shape == (1024, 256)
        return
    with pytest.raises(RejectedFile) as info:
        read_radiograph(path, ADMIT_ALL)
    assert info.value.reason == "decode-error"
    assert "chexretrieve[gpl-codecs]" in info.value.message


def test_jpeg_ls_near_lossless_decodes(tmp_path):
    ds = pydicom.dcmread(get_testdata_file("JPEGLSNearLossless_16.dcm"))
    ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.SOPInstanceUID = "1.2.3", "1.2.3.4", "1.2.3.4.5"
    ds.Modality = "DX"
    ds.save_as(tmp_path / "jls.dcm")
    rad = read_radiograph(tmp_path / "jls.dcm")
    reference = pydicom.dcmread(tmp_path / "jls.dcm").pixel_array
    assert rad.pixel_sha256 == naive_sha256(reference)
    assert rad.metadata.transfer_syntax == "1.2.840.10008.1.2.4.81"


# ---------------------------------------------------------------------------------- metadata


@pytest.mark.parametrize(
    ("text", "years"),
    [("065Y", 65.0), ("006M", 0.5), ("010W", 70 / 365.25), ("003D", 3 / 365.25), (" 45 ", 45.0),
     ("abc", None), ("", None), ("999Y", None), ("12X", None)],
)  # fmt: skip
def test_parse_age_string(text, years):
    assert parse_age_string(text) == (pytest.approx(years) if years is not None else None)


def test_parse_date_formats():
    assert parse_date("20040826") == dt.date(2004, 8, 26)
    assert parse_date("2004.08.26") == dt.date(2004, 8, 26)
    assert parse_date("2004-08-26") == dt.date(2004, 8, 26)
    for bad in ("20041326", "2004082", "00000000", "yesterday", "", None):
        assert parse_date(bad) is None


@pytest.mark.filterwarnings("ignore:Invalid value for VR")
def test_age_from_birth_and_study_dates_and_lenient_fields(tmp_path):
    ds = radiograph_dataset()
    del ds.PatientAge
    ds.PatientBirthDate, ds.StudyDate = "20000101", "20100101"
    ds.PatientSex = "female"
    ds.ViewPosition = " ap "
    meta = read_radiograph(write(ds, tmp_path / "a.dcm")).metadata
    assert meta.patient_age_years == pytest.approx(3653 / 365.25)
    assert (meta.patient_sex, meta.view_position) == ("F", "AP")


@pytest.mark.filterwarnings("ignore:Invalid value for VR")
def test_unparseable_descriptive_fields_become_none_with_notes(tmp_path):
    ds = radiograph_dataset()
    ds.PatientAge, ds.PatientBirthDate, ds.StudyDate = "old", "19991399", "notadate"
    ds.PatientSex = "Q"
    del ds.ViewPosition
    rad = read_radiograph(write(ds, tmp_path / "b.dcm"))
    meta = rad.metadata
    assert (meta.patient_age_years, meta.study_date, meta.patient_sex) == (None, None, None)
    assert meta.view_position is None
    assert any("PatientAge 'old'" in note for note in rad.warnings)


def test_imager_pixel_spacing_is_the_fallback(tmp_path):
    ds = radiograph_dataset()
    del ds.PixelSpacing
    ds.ImagerPixelSpacing = [0.2, 0.2]
    assert read_radiograph(write(ds, tmp_path / "i.dcm")).metadata.pixel_spacing == (0.2, 0.2)


def test_header_read_matches_full_read_and_skips_decoding(tmp_path, monkeypatch):
    path = write(radiograph_dataset(), tmp_path / "h.dcm", JPEG2000Lossless)
    full = read_radiograph(path)
    import chexretrieve.dicom.pixels as pixels_module

    def no_decoding(*args, **kwargs):
        raise AssertionError("read_dicom_header must not decode pixels")

    monkeypatch.setattr(pixels_module, "pixel_array", no_decoding)
    assert read_dicom_header(path) == full.metadata


def test_file_without_preamble_or_meta_reads_tolerantly(tmp_path):
    ds = radiograph_dataset()
    ds.preamble = None
    del ds.file_meta
    path = tmp_path / "bare.dcm"
    pydicom.dcmwrite(path, ds, implicit_vr=False, little_endian=True, enforce_file_format=False)
    rad = read_radiograph(path)
    assert rad.metadata.transfer_syntax == "1.2.840.10008.1.2.1"
    assert any("no Transfer Syntax UID" in note for note in rad.warnings)


# ---------------------------------------------------------------------------------- PNG and JPEG


def test_png_8_and_16_bit_and_jpeg(tmp_path):
    rng = np.random.default_rng(0)
    grey8 = rng.integers(0, 256, (30, 20), dtype=np.uint8)
    grey16 = rng.integers(0, 65536, (30, 20), dtype=np.uint16)
    Image.fromarray(grey8).save(tmp_path / "a.png")
    Image.fromarray(grey16).save(tmp_path / "b.png")
    Image.fromarray(grey8).save(tmp_path / "c.jpg", quality=95)
    a = read_radiograph(tmp_path / "a.png")
    b = read_radiograph(tmp_path / "b.png")
    c = read_radiograph(tmp_path / "c.jpg")
    np.testing.assert_allclose(a.pixels, grey8 / 255.0, atol=1e-6)
    np.testing.assert_allclose(b.pixels, grey16 / 65535.0, atol=1e-6)
    assert np.abs(c.pixels - grey8 / 255.0).mean() < 0.1  # lossy
    assert a.pixel_sha256 == naive_sha256(grey8) and b.pixel_sha256 == naive_sha256(grey16)
    assert a.metadata.source_format == "png" and c.metadata.source_format == "jpeg"
    uid = "2.25." + str(int(a.pixel_sha256[:32], 16))
    assert a.metadata.study_uid == a.metadata.series_uid == a.metadata.sop_uid == uid
    assert (a.metadata.patient_id, a.metadata.modality, a.metadata.rows) == (None, None, 30)


def test_grey_saved_as_rgb_is_read_but_colour_is_rejected(tmp_path):
    grey = np.random.default_rng(1).integers(0, 256, (16, 16), dtype=np.uint8)
    Image.fromarray(np.stack([grey] * 3, axis=-1)).save(tmp_path / "grey.png")
    assert read_radiograph(tmp_path / "grey.png").pixel_sha256 == naive_sha256(grey)
    colour = np.zeros((16, 16, 3), dtype=np.uint8)
    colour[..., 0] = 200
    Image.fromarray(colour).save(tmp_path / "red.png")
    with pytest.raises(RejectedFile) as info:
        read_radiograph(tmp_path / "red.png")
    assert info.value.reason == "photometric" and "colour" in info.value.message


# ---------------------------------------------------------------------------------- display, fields


def test_render_for_display():
    pixels = np.linspace(0, 1, 11, dtype=np.float32).reshape(1, 11)
    np.testing.assert_array_equal(render_for_display(pixels)[0], np.rint(np.linspace(0, 255, 11)))
    narrow = render_for_display(pixels, window_center=0.5, window_width=0.2)[0]
    expected = np.clip((pixels[0] - 0.4) / 0.2 * 255, 0, 255)
    assert np.abs(narrow - expected).max() <= 0.51
    assert list(narrow[:4]) == [0, 0, 0, 0] and list(narrow[-4:]) == [255] * 4
    with pytest.raises(ValueError, match="width > 0"):
        render_for_display(pixels, window_width=0)


def test_list_text_fields_names_nested_and_private_elements(tmp_path):
    ds = radiograph_dataset()
    ds.StudyDescription = "<script>alert(1)</script>"
    code = Dataset()
    code.CodeMeaning = "postero-anterior"
    ds.ViewCodeSequence = Sequence([code])
    ds.add_new(0x00090010, "LO", "ACME")
    fields = dict(list_text_fields(write(ds, tmp_path / "t.dcm")))
    assert fields["StudyDescription"] == "<script>alert(1)</script>"  # unescaped on purpose
    assert fields["ViewCodeSequence[0].CodeMeaning"] == "postero-anterior"
    assert fields["(0009,0010)"] == "ACME"
    assert fields["TransferSyntaxUID"] == "1.2.840.10008.1.2.1"
    assert "PixelData" not in fields and "Rows" not in fields  # binary and numeric VRs excluded


# ---------------------------------------------------------------------------------- plumbing


def test_rejected_file_pickles_and_knows_its_reasons():
    error = pickle.loads(pickle.dumps(RejectedFile("truncated", "cut")))
    assert (error.reason, error.message) == ("truncated", "cut")
    assert isinstance(error, ValueError)
    with pytest.raises(ValueError, match="unknown rejection reason"):
        RejectedFile("whatever", "x")
    assert {"not-dicom", "empty-file", "truncated", "too-large", "decode-error"} <= set(
        REJECTION_REASONS
    )


def test_pydicom_test_file_finds_local_files_and_never_downloads():
    assert pydicom_test_file("RG1_UNCI.dcm").name == "RG1_UNCI.dcm"
    with pytest.raises(ValueError, match="not among pydicom's local test files"):
        pydicom_test_file("no_such_file_anywhere.dcm")


def test_read_config_rejects_bad_settings():
    with pytest.raises(ValueError, match="max_pixels"):
        ReadConfig(max_pixels=0)
    with pytest.raises(ValueError, match="allowed_formats"):
        ReadConfig(allowed_formats=("gif",))
    with pytest.raises(ValueError, match="tuple of codes"):
        ReadConfig(allowed_modalities="CR")
    assert ReadConfig(allowed_modalities=("cr",)).allowed_modalities == ("CR",)


def test_import_survives_a_dl_folder_and_keeps_zlib_working(tmp_path):
    (tmp_path / "dl").mkdir()  # gdcm.py runs `import dl`; a folder of that name used to crash it
    script = (
        "import chexretrieve.dicom as d, zlib\n"
        "c = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)\n"
        "assert c.compress(b'x' * 1000) + c.flush()\n"
        "print(d.GDCM_AVAILABLE)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "True"
