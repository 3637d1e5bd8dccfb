"""chexretrieve.dicom on hostile and broken input: always a RejectedFile with a clear reason."""

from __future__ import annotations

import collections
import struct
import tracemalloc

import numpy as np
import pydicom
import pytest
from dicom_read_factory import (
    insert_before_pixel_data,
    nested_sequence_bytes,
    radiograph_dataset,
    write,
)
from PIL import Image
from pydicom.data import get_testdata_file
from pydicom.uid import RLELossless

import chexretrieve.dicom.read as read_module
from chexretrieve.dicom import (
    REJECTION_REASONS,
    ReadConfig,
    RejectedFile,
    list_text_fields,
    read_dicom_header,
    read_radiograph,
)

ADMIT_ALL = ReadConfig(allowed_modalities=None)


def rejection(path, config: ReadConfig | None = None) -> RejectedFile:
    with pytest.raises(RejectedFile) as info:
        read_radiograph(path, config or ReadConfig())
    error = info.value
    assert error.reason in REJECTION_REASONS
    assert str(path.name if hasattr(path, "name") else path).split("/")[-1] in error.message
    return error


# ---------------------------------------------------------------------------------- wrong content


def test_png_text_and_empty_files_named_dcm(tmp_path):
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(tmp_path / "image.png")
    (tmp_path / "image.dcm").write_bytes((tmp_path / "image.png").read_bytes())
    (tmp_path / "notes.dcm").write_text("Patient was seen today.\n" * 20)
    (tmp_path / "empty.dcm").write_bytes(b"")
    error = rejection(tmp_path / "image.dcm")
    assert error.reason == "not-dicom" and "PNG image" in error.message
    error = rejection(tmp_path / "notes.dcm")
    assert error.reason == "not-dicom" and "not DICOM" in error.message
    error = rejection(tmp_path / "empty.dcm")
    assert error.reason == "empty-file" and "0 bytes" in error.message


def test_dicom_named_png_and_jpeg_named_png(tmp_path):
    write(radiograph_dataset(), tmp_path / "scan.png")
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(tmp_path / "photo.png", format="JPEG")
    assert rejection(tmp_path / "scan.png").reason == "unsupported-format"
    error = rejection(tmp_path / "photo.png")
    assert error.reason == "unsupported-format" and "JPEG image" in error.message


def test_missing_path_and_folder_are_unreadable(tmp_path):
    assert rejection(tmp_path / "absent.dcm").reason == "unreadable"
    (tmp_path / "folder.dcm").mkdir()
    assert rejection(tmp_path / "folder.dcm").reason == "unreadable"


def test_file_size_cap(tmp_path):
    path = write(radiograph_dataset(), tmp_path / "big.dcm")
    error = rejection(path, ReadConfig(max_file_bytes=1000))
    assert error.reason == "too-large" and "max_file_bytes" in error.message


def test_disallowed_format(tmp_path):
    Image.fromarray(np.zeros((8, 8), dtype=np.uint8)).save(tmp_path / "a.png")
    error = rejection(tmp_path / "a.png", ReadConfig(allowed_formats=("dicom",)))
    assert error.reason == "unsupported-format" and "allowed_formats" in error.message


# ---------------------------------------------------------------------------------- truncation


def test_truncated_in_the_header(tmp_path):
    data = write(radiograph_dataset(), tmp_path / "full.dcm").read_bytes()
    inside_value = data.find(b"Test Vendor") + 4  # cut inside Manufacturer's value
    inside_tag = data.find(struct.pack("<HH", 0x0028, 0x0010)) + 3  # cut inside Rows' tag
    for name, cut in (("value.dcm", inside_value), ("tag.dcm", inside_tag), ("meta.dcm", 140)):
        (tmp_path / name).write_bytes(data[:cut])
        error = rejection(tmp_path / name)
        assert error.reason == "truncated", (name, error)
        assert "cut short" in error.message or "ends" in error.message


def test_truncated_in_the_pixel_data(tmp_path):
    data = write(radiograph_dataset(), tmp_path / "full.dcm").read_bytes()
    (tmp_path / "short.dcm").write_bytes(data[:-1000])
    error = rejection(tmp_path / "short.dcm")
    assert error.reason == "truncated" and "cut short" in error.message
    with pytest.raises(RejectedFile, match="cut short"):
        read_dicom_header(tmp_path / "short.dcm")
    rle = write(radiograph_dataset(), tmp_path / "rle.dcm", RLELossless).read_bytes()
    (tmp_path / "rle_short.dcm").write_bytes(rle[:-500])
    assert rejection(tmp_path / "rle_short.dcm").reason == "truncated"


def test_truncated_png(tmp_path):
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (64, 64), dtype=np.uint8)).save(tmp_path / "a.png")
    data = (tmp_path / "a.png").read_bytes()
    (tmp_path / "cut.png").write_bytes(data[: len(data) // 2])
    assert rejection(tmp_path / "cut.png").reason in ("truncated", "decode-error")


# ---------------------------------------------------------------------------------- object kinds


def test_structured_report_and_dicomdir_are_not_images():
    for name in ("test-SR.dcm", "DICOMDIR", "rtplan.dcm"):
        path = get_testdata_file(name)
        with pytest.raises(RejectedFile) as info:
            read_radiograph(path, ADMIT_ALL)
        assert info.value.reason == "non-image-object", name
        assert "not an image" in info.value.message or "non-image" in info.value.message


def test_image_without_pixel_data(tmp_path):
    ds = radiograph_dataset()
    del ds.PixelData
    error = rejection(write(ds, tmp_path / "nopix.dcm"))
    assert error.reason == "no-pixel-data" and "Pixel Data" in error.message


def test_multi_frame_is_rejected(tmp_path):
    ds = radiograph_dataset()
    ds.NumberOfFrames = 2
    ds.PixelData = ds.PixelData * 2
    error = rejection(write(ds, tmp_path / "two.dcm"))
    assert error.reason == "multi-frame" and "2 frames" in error.message
    with pytest.raises(RejectedFile) as info:
        read_radiograph(get_testdata_file("emri_small.dcm"), ADMIT_ALL)
    assert info.value.reason == "multi-frame"


def test_other_modalities_need_to_be_admitted(tmp_path):
    path = write(radiograph_dataset(modality="CT"), tmp_path / "ct.dcm")
    error = rejection(path)
    assert error.reason == "modality" and "allowed_modalities" in error.message
    assert read_radiograph(path, ReadConfig(allowed_modalities=("CT",))).metadata.modality == "CT"


def test_missing_modality_is_inferred_from_the_sop_class(tmp_path):
    ds = radiograph_dataset()
    del ds.Modality
    rad = read_radiograph(write(ds, tmp_path / "nomod.dcm"))
    assert rad.metadata.modality == "CR"


def test_for_processing_is_rejected_unless_allowed(tmp_path):
    ds = radiograph_dataset(modality="DX")
    ds.PresentationIntentType = "FOR PROCESSING"
    path = write(ds, tmp_path / "raw.dcm")
    assert rejection(path).reason == "for-processing"
    assert read_radiograph(path, ReadConfig(allow_for_processing=True)).pixels.shape == (64, 48)


def test_colour_dicom_is_rejected():
    with pytest.raises(RejectedFile) as info:
        read_radiograph(get_testdata_file("SC_rgb.dcm"), ADMIT_ALL)
    assert info.value.reason == "photometric" and "RGB" in info.value.message


# ---------------------------------------------------------------------------------- fields


@pytest.mark.filterwarnings("ignore:Invalid value for VR", "ignore:The value length")
@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        (lambda ds: ds.add_new(0x00280010, "LO", "abc"), "invalid-field", "Rows has VR LO"),
        (lambda ds: setattr(ds, "Rows", 0), "invalid-field", "Rows must be in 1..65535"),
        (lambda ds: setattr(ds, "BitsStored", 17), "invalid-field", "BitsStored must be in 1..16"),
        (lambda ds: setattr(ds, "BitsAllocated", 12), "invalid-field", "BitsAllocated must be"),
        (lambda ds: setattr(ds, "PixelRepresentation", 2), "invalid-field", "PixelRepresentation"),
        (lambda ds: delattr(ds, "BitsStored"), "missing-field", "BitsStored is missing"),
        (lambda ds: delattr(ds, "PhotometricInterpretation"), "missing-field", "Photometric"),
        (lambda ds: setattr(ds, "PhotometricInterpretation", "PALETTE COLOR"), "photometric",
         "PALETTE COLOR"),
        (lambda ds: setattr(ds, "PixelSpacing", [-0.1, 0.1]), "invalid-field", "PixelSpacing"),
        (lambda ds: setattr(ds, "PixelSpacing", [0.1]), "invalid-field", "two positive numbers"),
        (lambda ds: setattr(ds, "StudyInstanceUID", "1.2.abc"), "invalid-field", "not a valid UID"),
        (lambda ds: setattr(ds, "SeriesInstanceUID", "1." * 40 + "1"), "invalid-field",
         "at most 64"),
        (lambda ds: delattr(ds, "StudyInstanceUID"), "missing-field", "StudyInstanceUID"),
        (lambda ds: setattr(ds, "RescaleSlope", "nan"), "invalid-field", "finite number"),
        (lambda ds: setattr(ds, "RescaleSlope", 0), "invalid-field", "other than 0"),
        (lambda ds: setattr(ds, "NumberOfFrames", 0), "invalid-field", "at least 1"),
    ],
)  # fmt: skip
def test_fields_we_rely_on_are_validated(tmp_path, change, reason, words):
    ds = radiograph_dataset()
    change(ds)
    error = rejection(write(ds, tmp_path / "field.dcm"))
    assert error.reason == reason, error
    assert words in error.message


def test_missing_sop_uid_falls_back_to_the_file_meta_copy(tmp_path):
    ds = radiograph_dataset()
    del ds.SOPInstanceUID
    rad = read_radiograph(write(ds, tmp_path / "nosop.dcm"))
    assert rad.metadata.sop_uid == ds.file_meta.MediaStorageSOPInstanceUID
    assert any("file meta" in note for note in rad.warnings)


# ---------------------------------------------------------------------------------- size caps


def _huge_header(tmp_path, name, syntax=None):
    ds = radiograph_dataset(16, 16)
    path = write(ds, tmp_path / name, syntax)
    ds = pydicom.dcmread(path)
    ds.Rows = ds.Columns = 65535  # the header lies; the pixel data stays 16 x 16
    ds.save_as(path)
    return path


@pytest.mark.parametrize("syntax", [None, RLELossless])
def test_65535_squared_headers_are_rejected_before_allocation(tmp_path, syntax):
    path = _huge_header(tmp_path, "huge.dcm", syntax)
    tracemalloc.start()
    try:
        error = rejection(path)
        assert error.reason == "too-large" and "65535 x 65535" in error.message
        # with the cap lifted the length checks still refuse before any decoder allocates 8 GiB
        error = rejection(path, ReadConfig(max_pixels=1 << 33))
        assert error.reason == "truncated"
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20_000_000, f"peak {peak:,} bytes: something allocated from the header"


def test_png_pixel_cap(tmp_path):
    Image.fromarray(np.zeros((100, 100), dtype=np.uint8)).save(tmp_path / "wide.png")
    assert rejection(tmp_path / "wide.png", ReadConfig(max_pixels=5000)).reason == "too-large"


# ---------------------------------------------------------------------------------- nesting


@pytest.mark.parametrize(("depth", "reason"), [(10, None), (40, "too-deep"), (200, "too-deep"),
                                               (3000, "too-deep")])  # fmt: skip
def test_deeply_nested_sequences(tmp_path, depth, reason):
    data = write(radiograph_dataset(), tmp_path / "flat.dcm").read_bytes()
    path = tmp_path / f"nested{depth}.dcm"
    path.write_bytes(insert_before_pixel_data(data, nested_sequence_bytes(depth)))
    if reason is None:
        assert read_radiograph(path).pixels.shape == (64, 48)
        names = [name for name, _ in list_text_fields(path)]
        assert "StudyInstanceUID" in names
        return
    error = rejection(path)
    assert error.reason == reason and "deep" in error.message
    with pytest.raises(RejectedFile) as info:
        list_text_fields(path)
    assert info.value.reason == "too-deep"


# ---------------------------------------------------------------------------------- robustness


def test_unexpected_exceptions_become_decode_errors(tmp_path, monkeypatch):
    path = write(radiograph_dataset(), tmp_path / "ok.dcm")

    def explode(*args, **kwargs):
        raise ZeroDivisionError("boom")

    monkeypatch.setattr(read_module, "display_pixels", explode)
    error = rejection(path)
    assert error.reason == "decode-error" and "ZeroDivisionError" in error.message


def test_corrupt_compressed_stream_is_a_decode_error(tmp_path):
    data = bytearray(write(radiograph_dataset(), tmp_path / "j.dcm", "1.2.840.10008.1.2.4.90")
                     .read_bytes())  # fmt: skip
    start = data.find(b"\xff\x4f\xff\x51")  # JPEG 2000 codestream start (SOC, SIZ)
    data[start + 4 : start + 40] = bytes(36)  # wipe the image size (SIZ) parameters
    (tmp_path / "broken.dcm").write_bytes(bytes(data))
    error = rejection(tmp_path / "broken.dcm")
    assert error.reason == "decode-error" and "did not decode" in error.message


def test_200_seeded_random_corruptions_never_crash(tmp_path):
    valid = write(radiograph_dataset(32, 24), tmp_path / "valid.dcm").read_bytes()
    rng = np.random.default_rng(20240601)
    outcomes: collections.Counter[str] = collections.Counter()
    path = tmp_path / "corrupt.dcm"
    for trial in range(200):
        data = bytearray(valid)
        if trial % 4 == 3:  # every fourth: a random truncation too
            data = data[: int(rng.integers(1, len(data)))]
        for _ in range(int(rng.integers(1, 9))):
            if data:
                data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
        path.write_bytes(bytes(data))
        try:
            rad = read_radiograph(path)
        except RejectedFile as error:
            assert error.reason in REJECTION_REASONS
            outcomes[error.reason] += 1
            continue
        assert rad.pixels.dtype == np.float32 and rad.pixels.ndim == 2
        assert np.isfinite(rad.pixels).all()
        assert 0.0 <= rad.pixels.min() and rad.pixels.max() <= 1.0
        outcomes["read"] += 1
    assert sum(outcomes.values()) == 200
    assert outcomes["read"] > 0 and outcomes["truncated"] > 0, outcomes
