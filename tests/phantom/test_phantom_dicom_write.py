"""Strict DICOM writing: round trips for every transfer syntax, photometric and modality."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydicom
import pytest

from chexretrieve.dicom import read_radiograph
from chexretrieve.dicom.write import (
    TRANSFER_SYNTAXES,
    DicomWriteError,
    derive_uid,
    write_radiograph,
)


def _metadata(**changes: object) -> dict[str, object]:
    base: dict[str, object] = {
        "PatientID": "PH0001-0000042",
        "PatientName": "PHANTOM^0000042",
        "PatientSex": "F",
        "PatientBirthDate": "19610304",
        "PatientAge": "058Y",
        "StudyInstanceUID": derive_uid("test", "study"),
        "SeriesInstanceUID": derive_uid("test", "series"),
        "SOPInstanceUID": derive_uid("test", "image"),
        "StudyDate": "2019-05-06",
        "Modality": "DX",
        "ViewPosition": "PA",
        "Manufacturer": "chexretrieve phantom",
        "ImageComments": "SYNTHETIC PHANTOM - not a patient",
        "PixelSpacing": [0.8, 0.8],
    }
    base.update(changes)
    return base


@pytest.fixture(scope="module")
def pixels() -> np.ndarray:
    rng = np.random.default_rng(5)
    smooth = np.cumsum(rng.integers(-40, 41, size=(40, 36)), axis=1)
    return np.clip(smooth + 2000, 0, 4095).astype(np.uint16)


@pytest.mark.parametrize("modality", ["CR", "DX"])
@pytest.mark.parametrize("photometric", ["MONOCHROME1", "MONOCHROME2"])
@pytest.mark.parametrize("syntax", list(TRANSFER_SYNTAXES))
def test_round_trip_gives_identical_pixels(
    tmp_path: Path, pixels: np.ndarray, syntax: str, photometric: str, modality: str
) -> None:
    path = write_radiograph(
        tmp_path / "x.dcm", pixels, _metadata(Modality=modality), syntax, photometric
    )
    ds = pydicom.dcmread(path)
    assert ds.file_meta.TransferSyntaxUID == TRANSFER_SYNTAXES[syntax]
    assert ds.PhotometricInterpretation == photometric and ds.Modality == modality
    # the caller's UIDs, not ones pydicom makes up while setting or compressing the pixels
    assert (
        ds.SOPInstanceUID == derive_uid("test", "image") == ds.file_meta.MediaStorageSOPInstanceUID
    )
    again = write_radiograph(
        tmp_path / "y.dcm", pixels, _metadata(Modality=modality), syntax, photometric
    )
    assert again.read_bytes() == path.read_bytes()  # the same input writes the same bytes
    stored = ds.pixel_array
    expected = 4095 - pixels if photometric == "MONOCHROME1" else pixels
    assert np.array_equal(stored, expected)
    # the project's reader shows MONOCHROME1 inverted back: the same picture either way
    radiograph = read_radiograph(path)
    assert np.allclose(radiograph.pixels, pixels / 4095.0, atol=1e-6)


def test_written_file_carries_the_required_attributes(tmp_path: Path, pixels: np.ndarray) -> None:
    for modality, sop_class in (
        ("CR", "1.2.840.10008.5.1.4.1.1.1"),
        ("DX", "1.2.840.10008.5.1.4.1.1.1.1"),
    ):
        path = write_radiograph(tmp_path / f"{modality}.dcm", pixels, _metadata(Modality=modality))
        ds = pydicom.dcmread(path)
        assert ds.SOPClassUID == sop_class == ds.file_meta.MediaStorageSOPClassUID
        assert ds.SOPInstanceUID == ds.file_meta.MediaStorageSOPInstanceUID
        assert (ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation) == (
            16,
            12,
            11,
            0,
        )
        assert (ds.Rows, ds.Columns) == pixels.shape
        assert float(ds.WindowCenter) == 2048 and float(ds.WindowWidth) == 4096
        assert ds.PatientAge == "058Y" and ds.PatientBirthDate == "19610304"
        assert ds.StudyDate == "20190506" and ds.BodyPartExamined == "CHEST"
        assert ds.Manufacturer == "chexretrieve phantom" and "SYNTHETIC" in ds.ImageComments
        for keyword in (
            "StudyTime",
            "ReferringPhysicianName",
            "StudyID",
            "AccessionNumber",
            "SeriesNumber",
            "InstanceNumber",
            "PatientOrientation",
        ):
            assert keyword in ds, keyword
        if modality == "DX":
            assert ds.PresentationIntentType == "FOR PRESENTATION"
            assert ds.AnatomicRegionSequence[0].CodeMeaning == "Chest"
        with open(path, "rb") as handle:
            assert handle.read(132)[128:] == b"DICM"


def test_derived_uids_are_deterministic_and_valid() -> None:
    a, b = derive_uid(3, 7, "study"), derive_uid(3, 7, "study")
    assert a == b != derive_uid(3, 8, "study")
    assert len(a) <= 64 and all(part.isdigit() for part in a.split("."))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"PatientID": ""}, "PatientID"),
        ({"SOPInstanceUID": "1.2.03.4"}, "not a valid UID"),
        ({"StudyInstanceUID": "1.2.abc"}, "not a valid UID"),
        ({"Modality": "MR"}, "Modality"),
        ({"PatientAge": "54"}, "PatientAge"),
        ({"StudyDate": "2019-13-45"}, "date"),
        ({"PatientSex": "X"}, "PatientSex"),
        ({"PixelSpacing": [0.0, 1.0]}, "PixelSpacing"),
    ],
)
def test_bad_metadata_is_refused_and_nothing_is_written(
    tmp_path: Path, pixels: np.ndarray, change: dict, message: str
) -> None:
    target = tmp_path / "bad.dcm"
    with pytest.raises(ValueError, match=message):
        write_radiograph(target, pixels, _metadata(**change))
    assert not target.exists()


def test_bad_pixels_and_options_are_refused(tmp_path: Path, pixels: np.ndarray) -> None:
    target = tmp_path / "bad.dcm"
    with pytest.raises(DicomWriteError, match="uint16"):
        write_radiograph(target, pixels.astype(np.uint8), _metadata())
    with pytest.raises(DicomWriteError, match="2-D"):
        write_radiograph(target, pixels[0], _metadata())
    with pytest.raises(DicomWriteError, match="at most 4095"):
        write_radiograph(target, pixels + 4000, _metadata())
    with pytest.raises(DicomWriteError, match="transfer syntax"):
        write_radiograph(target, pixels, _metadata(), transfer_syntax="jpeg-lossy")
    with pytest.raises(DicomWriteError, match="photometric"):
        write_radiograph(target, pixels, _metadata(), photometric="RGB")
    assert not target.exists()
