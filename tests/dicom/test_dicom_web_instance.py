"""What the DICOMweb endpoint sends for one file: the frame is the stored values (checked against
pydicom's own decoding of the file, also of a compressed one), the header is the DICOM JSON
model without pixel data, and de-identification leaves no identifying text anywhere in it."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pydicom
import pytest

from chexretrieve.dicom import pydicom_test_file
from chexretrieve.dicom.dicomweb import FRAME_TRANSFER_SYNTAX, pseudonym, web_instance
from chexretrieve.dicom.write import derive_uid, write_radiograph

PHI = {
    "PatientName": "Doe^Jane^Q",
    "PatientID": "SECRET-PID-7",
    "PatientBirthDate": "19610305",
    "AccessionNumber": "ACC-998877",
    "InstitutionName": "St Elsewhere Hospital",
    "ReferringPhysicianName": "House^Gregory",
    "OperatorsName": "Tech^Tom",
    "StudyDescription": "CHEST for Jane Doe",
    "OtherPatientIDs": "OTHER-ID-55",
}


def _phi_file(path):
    y, x = np.mgrid[0:64, 0:80]
    values = (x * 40 + y).astype(np.uint16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        write_radiograph(
            path,
            values,
            {
                "StudyInstanceUID": derive_uid("web", "study"),
                "SeriesInstanceUID": derive_uid("web", "series"),
                "SOPInstanceUID": derive_uid("web", "image"),
                "Modality": "DX", "PatientSex": "F", "PatientAge": "061Y",
                "StudyDate": "20240305", "ViewPosition": "PA",
                **{k: v for k, v in PHI.items() if k != "OtherPatientIDs"},
            },
        )  # fmt: skip
    ds = pydicom.dcmread(path)
    ds.OtherPatientIDs = PHI["OtherPatientIDs"]
    ds.add_new(0x00091010, "LO", "private note: Jane Doe")  # a private element
    ds.save_as(path)
    return values


def test_deidentified_header_carries_no_identifying_text(tmp_path):
    path = tmp_path / "phi.dcm"
    _phi_file(path)
    shown = web_instance(path, deidentify=True)
    text = json.dumps(shown.metadata)
    for value in (*PHI.values(), "Jane", "Doe", "private note"):
        assert value not in text, value
    assert shown.metadata["00100020"]["Value"] == [pseudonym("SECRET-PID-7")]
    assert shown.metadata["00120062"]["Value"] == ["YES"]  # Patient Identity Removed
    # what every user of the case lookup sees stays: sex, age, date, view, the UIDs
    for tag, value in (("00100040", "F"), ("00101010", "061Y"), ("00080020", "20240305"),
                       ("00185101", "PA")):  # fmt: skip
        assert shown.metadata[tag]["Value"] == [value]
    assert shown.metadata["0020000D"]["Value"] == [shown.study_uid]
    full = web_instance(path, deidentify=False)
    assert full.metadata["00100010"]["Value"] == [{"Alphabetic": "Doe^Jane^Q"}]
    assert full.metadata["00100020"]["Value"] == ["SECRET-PID-7"]


def test_the_frame_is_the_stored_values_little_endian(tmp_path):
    path = tmp_path / "phi.dcm"
    values = _phi_file(path)
    shown = web_instance(path)
    assert "7FE00010" not in shown.metadata  # no pixel data in the header
    assert shown.metadata["00020010"]["Value"] == [FRAME_TRANSFER_SYNTAX]
    bits = shown.metadata["00280100"]["Value"][0]
    rows, cols = shown.metadata["00280010"]["Value"][0], shown.metadata["00280011"]["Value"][0]
    frame = np.frombuffer(shown.frame, dtype="<u2" if bits == 16 else "u1").reshape(rows, cols)
    np.testing.assert_array_equal(frame, values)


@pytest.mark.parametrize("name", ["RG1_UNCI.dcm", "RG1_J2KR.dcm", "RG3_UNCR.dcm", "RG3_J2KR.dcm"])
def test_compressed_and_real_files_send_what_pydicom_decodes(name):
    """Real radiographs (RG1, RG3) plain and JPEG 2000, the archive kinds a chest PACS sends."""
    path = pydicom_test_file(name)
    expected = pydicom.dcmread(path).pixel_array
    shown = web_instance(path)
    bits = shown.metadata["00280100"]["Value"][0]
    signed = shown.metadata["00280103"]["Value"][0] == 1
    dtype = ("<i" if signed else "<u") + str(bits // 8)
    frame = np.frombuffer(shown.frame, dtype=dtype).reshape(expected.shape)
    np.testing.assert_array_equal(frame, expected)
    spacing = shown.metadata.get("00280030", {}).get("Value")
    assert spacing is None or all(float(v) > 0 for v in spacing)  # RG1's zero spacing is dropped


@pytest.mark.parametrize("photometric", ["MONOCHROME1", "MONOCHROME2"])
def test_the_thumbnail_is_the_file_under_its_own_window(tmp_path, photometric):
    """A left-to-right ramp of stored values: under MONOCHROME2 low values show black, under
    MONOCHROME1 white (the thumbnail OHIF's study browser shows)."""
    import io

    from PIL import Image

    from chexretrieve.dicom.dicomweb import thumbnail_jpeg

    ramp = np.tile(np.linspace(0, 4095, 200).astype(np.uint16), (100, 1))
    path = tmp_path / "ramp.dcm"
    write_radiograph(path, ramp, {"StudyInstanceUID": derive_uid("t", 1),
                                  "SeriesInstanceUID": derive_uid("t", 2),
                                  "SOPInstanceUID": derive_uid("t", 3), "Modality": "CR",
                                  "PatientID": "T"}, photometric=photometric)  # fmt: skip
    stored = pydicom.dcmread(path).pixel_array.astype(float)
    low_left = stored[:, :6].mean() < stored[:, -6:].mean()  # how the writer stored the ramp
    with Image.open(io.BytesIO(thumbnail_jpeg(path, 64))) as image:
        grey = np.asarray(image.convert("L"), dtype=float)
    assert max(grey.shape) == 64
    left, right = grey[:, :6].mean(), grey[:, -6:].mean()
    left_white = low_left == (photometric == "MONOCHROME1")
    assert (left > 240 and right < 15) if left_white else (left < 15 and right > 240)
