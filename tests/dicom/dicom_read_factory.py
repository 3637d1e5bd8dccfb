"""Build small DICOM radiographs in code for the chexretrieve.dicom reading tests."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileDataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian

import chexretrieve.dicom  # noqa: F401 - guards the gdcm import before pydicom codecs load

CR_STORAGE = "1.2.840.10008.5.1.4.1.1.1"
STUDY_UID = "1.2.826.0.1.3680043.8.498.1"
SERIES_UID = "1.2.826.0.1.3680043.8.498.1.2"
SOP_UID = "1.2.826.0.1.3680043.8.498.1.2.3"


def stored_values(rows: int, columns: int, bits_stored: int, seed: int) -> np.ndarray:
    """A seeded smooth-plus-noise image that uses the whole BitsStored range."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:rows, 0:columns]
    smooth = (x / max(columns - 1, 1) + y / max(rows - 1, 1)) / 2
    noisy = np.clip(smooth + rng.normal(0, 0.05, (rows, columns)), 0, 1)
    top = 2**bits_stored - 1
    values = np.rint(noisy * top).astype(np.uint16)
    values[0, 0], values[-1, -1] = 0, top
    return values


def radiograph_dataset(
    rows: int = 64,
    columns: int = 48,
    *,
    bits_stored: int = 12,
    photometric: str = "MONOCHROME2",
    modality: str = "CR",
    seed: int = 0,
    values: np.ndarray | None = None,
) -> FileDataset:
    """A valid single-frame CR (16 bits allocated) with the metadata ingest indexes."""
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = CR_STORAGE
    meta.MediaStorageSOPInstanceUID = SOP_UID
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    ds = FileDataset("generated.dcm", {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID = CR_STORAGE
    ds.SOPInstanceUID = SOP_UID
    ds.StudyInstanceUID = STUDY_UID
    ds.SeriesInstanceUID = SERIES_UID
    ds.Modality = modality
    ds.PatientID = "PAT-001"
    ds.PatientSex = "F"
    ds.PatientAge = "065Y"
    ds.PatientBirthDate = "19400305"
    ds.StudyDate = "20040826"
    ds.ViewPosition = "PA"
    ds.Manufacturer = "Test Vendor"
    ds.BodyPartExamined = "CHEST"
    ds.PixelSpacing = [0.15, 0.16]
    ds.Rows = rows
    ds.Columns = columns
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = photometric
    ds.BitsAllocated = 16
    ds.BitsStored = bits_stored
    ds.HighBit = bits_stored - 1
    ds.PixelRepresentation = 0
    if values is None:
        values = stored_values(rows, columns, bits_stored, seed)
    ds.PixelData = np.ascontiguousarray(values, dtype="<u2").tobytes()
    return ds


def write(ds: Dataset, path: Path, syntax: str | None = None) -> Path:
    """Save ``ds`` to ``path``, compressed to ``syntax`` when it is a compressed transfer syntax."""
    ds = ds.copy()
    ds.file_meta = ds.file_meta.copy()
    if syntax is not None:
        uid = pydicom.uid.UID(syntax)
        if uid.is_compressed:
            ds.compress(uid, generate_instance_uid=False)
        else:
            ds.file_meta.TransferSyntaxUID = uid
    ds.save_as(path, enforce_file_format=True)
    return path


def nested_sequence_bytes(depth: int) -> bytes:
    """Explicit VR LE bytes of ``depth`` nested (0040,A730) sequences with undefined lengths."""
    head = struct.pack("<HH2sHI", 0x0040, 0xA730, b"SQ", 0, 0xFFFFFFFF)
    item = struct.pack("<HHI", 0xFFFE, 0xE000, 0xFFFFFFFF)
    closing = struct.pack("<HHI", 0xFFFE, 0xE00D, 0) + struct.pack("<HHI", 0xFFFE, 0xE0DD, 0)
    return (head + item) * depth + closing * depth


def insert_before_pixel_data(data: bytes, extra: bytes) -> bytes:
    """Splice ``extra`` (encoded elements with tags below 7FE0) in front of (7FE0,0010)."""
    position = data.rfind(struct.pack("<HH", 0x7FE0, 0x0010))
    assert position > 0, "no Pixel Data tag found"
    return data[:position] + extra + data[position:]
