"""DICOM objects received over the network (DICOMweb), turned back into Part-10 file bytes.

dicomweb-client hands a retrieved instance over as a parsed pydicom ``Dataset``; the ingest reads
files, so the instance is written back as a Part-10 file (preamble, file meta, the dataset in its
transfer syntax: pixel data bytes are passed through unchanged, compressed or not).
"""

from __future__ import annotations

import io

from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.uid import PYDICOM_IMPLEMENTATION_UID, ExplicitVRLittleEndian


def part10_bytes(dataset: object) -> tuple[bytes, str]:
    """(Part-10 bytes, SOPInstanceUID) of a received dataset; ValueError when it is not one or
    has no SOP Instance UID."""
    if not isinstance(dataset, Dataset):
        raise ValueError(
            f"expected a DICOM dataset from the DICOMweb client, got {type(dataset).__name__}"
        )
    sop_uid = str(dataset.get("SOPInstanceUID", "") or "").strip()
    if not sop_uid:
        raise ValueError("the received DICOM object has no SOP Instance UID; it cannot be stored")
    meta = getattr(dataset, "file_meta", None) or FileMetaDataset()
    if "TransferSyntaxUID" not in meta:
        meta.TransferSyntaxUID = ExplicitVRLittleEndian
    if "MediaStorageSOPClassUID" not in meta and "SOPClassUID" in dataset:
        meta.MediaStorageSOPClassUID = dataset.SOPClassUID
    meta.MediaStorageSOPInstanceUID = sop_uid
    if "ImplementationClassUID" not in meta:
        meta.ImplementationClassUID = PYDICOM_IMPLEMENTATION_UID
    dataset.file_meta = meta
    buffer = io.BytesIO()
    dataset.save_as(buffer, enforce_file_format=True)
    return buffer.getvalue(), sop_uid
