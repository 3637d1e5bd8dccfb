"""Strict writing of greyscale radiographs as CR or DX Image Storage DICOM files.

`write_radiograph(path, pixels, metadata, transfer_syntax=..., photometric=...)` builds a complete
dataset (patient, study, series, equipment, image, pixel, VOI LUT and SOP common modules with their
type 1 and type 2 attributes), compresses it when the transfer syntax asks for it and saves it with
``enforce_file_format=True``. Nothing is written when the input is invalid.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.sequence import Sequence as DicomSequence
from pydicom.uid import (
    UID,
    DeflatedExplicitVRLittleEndian,
    ExplicitVRLittleEndian,
    JPEG2000Lossless,
    RLELossless,
    generate_uid,
)

import chexretrieve.dicom.codec_setup  # noqa: F401  (gdcm import guard before any codec use)

CR_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.1"
DX_IMAGE_STORAGE_PRESENTATION = "1.2.840.10008.5.1.4.1.1.1.1"
SOP_CLASS_BY_MODALITY = {"CR": CR_IMAGE_STORAGE, "DX": DX_IMAGE_STORAGE_PRESENTATION}

#: transfer syntaxes the writer produces, by short name
TRANSFER_SYNTAXES: dict[str, UID] = {
    "explicit": ExplicitVRLittleEndian,
    "deflate": DeflatedExplicitVRLittleEndian,
    "rle": RLELossless,
    "jpeg2000": JPEG2000Lossless,
}
_ENCODER_PLUGIN = {RLELossless: "gdcm", JPEG2000Lossless: "pylibjpeg"}
_FALLBACK_PLUGIN = {RLELossless: "pydicom"}

#: attributes a caller must give (type 1 in the CR / DX IODs, or needed to be findable at all)
REQUIRED = ("PatientID", "StudyInstanceUID", "SeriesInstanceUID", "SOPInstanceUID", "Modality")
_UID_RE = re.compile(r"^(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))*$")
_DATE_RE = re.compile(r"^\d{8}$")
_AGE_RE = re.compile(r"^\d{3}[DWMY]$")


class DicomWriteError(ValueError):
    """The radiograph could not be written; the message names the attribute and the problem."""


def derive_uid(*parts: object) -> str:
    """A valid UID determined by `parts` (same parts, same UID), under pydicom's UID root."""
    return str(generate_uid(entropy_srcs=[str(p) for p in parts]))


def _check_uid(name: str, value: str) -> str:
    value = str(value)
    if len(value) > 64 or not _UID_RE.match(value):
        raise DicomWriteError(
            f"{name} {value!r} is not a valid UID (digits and dots, no leading zeros, <= 64 chars)"
        )
    return value


def _check_pixels(pixels: np.ndarray, bits_stored: int) -> np.ndarray:
    array = np.asarray(pixels)
    if array.ndim != 2 or min(array.shape) < 1:
        raise DicomWriteError(f"pixels must be a non-empty 2-D array, got shape {array.shape}")
    if array.dtype != np.uint16:
        raise DicomWriteError(f"pixels must be uint16, got {array.dtype}; scale and cast first")
    if not 1 <= bits_stored <= 16:
        raise DicomWriteError(f"bits_stored must lie in 1..16, got {bits_stored}")
    top = (1 << bits_stored) - 1
    if int(array.max()) > top:
        raise DicomWriteError(
            f"pixel values reach {int(array.max())}; {bits_stored} bits stored allow at most {top}"
        )
    return np.ascontiguousarray(array)


def _text(metadata: Mapping[str, object], key: str, default: object = "") -> object:
    value = metadata.get(key, default)
    return "" if value is None else value


def build_dataset(
    pixels: np.ndarray,
    metadata: Mapping[str, object],
    photometric: str = "MONOCHROME2",
    bits_stored: int = 12,
) -> Dataset:
    """The complete CR/DX dataset for `pixels` (presentation values, 0 = black).

    For MONOCHROME1 the stored values are inverted (max - value) so the image displays the same.
    `metadata` maps DICOM keywords to values; REQUIRED ones must be present. Dates are 'YYYYMMDD'
    strings or `datetime.date`s, PatientAge like '054Y'.
    """
    missing = [key for key in REQUIRED if not metadata.get(key)]
    if missing:
        raise DicomWriteError(f"metadata lacks required attributes {missing}")
    modality = str(metadata["Modality"])
    if modality not in SOP_CLASS_BY_MODALITY:
        raise DicomWriteError(f"Modality {modality!r} is not written; use 'CR' or 'DX'")
    if photometric not in ("MONOCHROME1", "MONOCHROME2"):
        raise DicomWriteError(
            f"photometric {photometric!r} is not written; use 'MONOCHROME1' or 'MONOCHROME2'"
        )
    array = _check_pixels(pixels, bits_stored)
    top = (1 << bits_stored) - 1
    stored = (top - array).astype(np.uint16) if photometric == "MONOCHROME1" else array
    sop_class = SOP_CLASS_BY_MODALITY[modality]
    sop_instance = _check_uid("SOPInstanceUID", metadata["SOPInstanceUID"])

    ds = Dataset()
    # SOP common
    ds.SOPClassUID = sop_class
    ds.SOPInstanceUID = sop_instance
    ds.SpecificCharacterSet = "ISO_IR 100"
    # patient (type 2)
    ds.PatientName = str(_text(metadata, "PatientName"))
    ds.PatientID = str(metadata["PatientID"])
    ds.PatientBirthDate = _date(metadata, "PatientBirthDate")
    ds.PatientSex = _choice(metadata, "PatientSex", ("M", "F", "O", ""))
    if metadata.get("PatientAge"):
        age = str(metadata["PatientAge"])
        if not _AGE_RE.match(age):
            raise DicomWriteError(f"PatientAge {age!r} must look like '054Y'")
        ds.PatientAge = age
    # general study
    ds.StudyInstanceUID = _check_uid("StudyInstanceUID", metadata["StudyInstanceUID"])
    ds.StudyDate = _date(metadata, "StudyDate")
    ds.StudyTime = str(_text(metadata, "StudyTime"))
    ds.ReferringPhysicianName = str(_text(metadata, "ReferringPhysicianName"))
    ds.StudyID = str(_text(metadata, "StudyID"))
    ds.AccessionNumber = str(_text(metadata, "AccessionNumber"))
    ds.StudyDescription = str(_text(metadata, "StudyDescription", "CHEST"))
    # general series
    ds.Modality = modality
    ds.SeriesInstanceUID = _check_uid("SeriesInstanceUID", metadata["SeriesInstanceUID"])
    ds.SeriesNumber = int(metadata.get("SeriesNumber", 1))
    ds.SeriesDate = ds.StudyDate
    ds.SeriesTime = ds.StudyTime
    ds.BodyPartExamined = str(_text(metadata, "BodyPartExamined", "CHEST"))
    ds.ViewPosition = _choice(metadata, "ViewPosition", ("PA", "AP", "LL", "RL", ""))
    ds.PatientPosition = ""
    # equipment
    ds.Manufacturer = str(_text(metadata, "Manufacturer"))
    ds.InstitutionName = str(_text(metadata, "InstitutionName"))
    ds.StationName = str(_text(metadata, "StationName"))
    # general image
    ds.InstanceNumber = int(metadata.get("InstanceNumber", 1))
    ds.PatientOrientation = list(metadata.get("PatientOrientation", ["L", "F"]))
    ds.ContentDate = ds.StudyDate
    ds.ContentTime = ds.StudyTime
    ds.ImageType = list(metadata.get("ImageType", ["DERIVED", "PRIMARY"]))
    ds.BurnedInAnnotation = "NO"
    ds.LossyImageCompression = "00"
    if metadata.get("ImageComments"):
        ds.ImageComments = str(metadata["ImageComments"])
    spacing = metadata.get("PixelSpacing")
    if spacing is not None:
        spacing = [float(v) for v in spacing]  # type: ignore[union-attr]
        if len(spacing) != 2 or min(spacing) <= 0:
            raise DicomWriteError(f"PixelSpacing must be two positive numbers, got {spacing}")
        ds.PixelSpacing = [f"{v:.6g}" for v in spacing]
        ds.ImagerPixelSpacing = ds.PixelSpacing
    # image pixel
    # pydicom would otherwise replace the caller's SOPInstanceUID with a random one
    ds.set_pixel_data(stored, photometric, bits_stored, generate_instance_uid=False)
    # modality LUT and VOI LUT: the whole stored range maps linearly onto the display range
    ds.RescaleIntercept = "0"
    ds.RescaleSlope = "1"
    ds.RescaleType = "US"
    ds.WindowCenter = f"{(top + 1) / 2:g}"
    ds.WindowWidth = f"{top + 1:g}"
    ds.VOILUTFunction = "LINEAR"
    ds.PresentationLUTShape = "INVERSE" if photometric == "MONOCHROME1" else "IDENTITY"
    if modality == "DX":
        ds.PresentationIntentType = "FOR PRESENTATION"
        ds.PixelIntensityRelationship = "LOG"
        ds.PixelIntensityRelationshipSign = 1
        ds.DetectorType = "SCINTILLATOR"
        ds.ImageLaterality = "U"
        region = Dataset()
        region.CodeValue = "43799004"
        region.CodingSchemeDesignator = "SCT"
        region.CodeMeaning = "Chest"
        ds.AnatomicRegionSequence = DicomSequence([region])
    return ds


def _date(metadata: Mapping[str, object], key: str) -> str:
    value = metadata.get(key)
    if value is None or value == "":
        return ""
    if isinstance(value, dt.date):
        return value.strftime("%Y%m%d")
    text = str(value).replace("-", "")
    if not _DATE_RE.match(text):
        raise DicomWriteError(f"{key} {value!r} is not a date (YYYYMMDD or YYYY-MM-DD)")
    try:
        dt.datetime.strptime(text, "%Y%m%d")
    except ValueError:
        raise DicomWriteError(f"{key} {value!r} is not a valid calendar date") from None
    return text


def _choice(metadata: Mapping[str, object], key: str, allowed: Sequence[str]) -> str:
    value = str(_text(metadata, key))
    if value not in allowed:
        raise DicomWriteError(f"{key} {value!r} must be one of {list(allowed)}")
    return value


def write_radiograph(
    path: str | os.PathLike[str],
    pixels_uint16: np.ndarray,
    metadata: Mapping[str, object],
    transfer_syntax: str = ExplicitVRLittleEndian,
    photometric: str = "MONOCHROME2",
    bits_stored: int = 12,
) -> Path:
    """Write a CR or DX Image Storage file; returns the path.

    `transfer_syntax` is a UID or a short name from TRANSFER_SYNTAXES ('explicit', 'deflate',
    'rle', 'jpeg2000'); compressed syntaxes are lossless, so pixels read back identical.
    """
    name = str(transfer_syntax)
    known = {str(uid) for uid in TRANSFER_SYNTAXES.values()}
    if name not in TRANSFER_SYNTAXES and name not in known:
        names = ", ".join(f"{k} ({v})" for k, v in TRANSFER_SYNTAXES.items())
        raise DicomWriteError(f"transfer syntax {transfer_syntax!r} is not written; use {names}")
    syntax = UID(TRANSFER_SYNTAXES[name]) if name in TRANSFER_SYNTAXES else UID(name)
    ds = build_dataset(pixels_uint16, metadata, photometric, bits_stored)
    if syntax.is_compressed:
        try:
            ds.compress(
                syntax, encoding_plugin=_ENCODER_PLUGIN[syntax], generate_instance_uid=False
            )
        except (RuntimeError, ImportError) as exc:
            fallback = _FALLBACK_PLUGIN.get(syntax)
            if fallback is None:
                raise DicomWriteError(
                    f"cannot encode {syntax.name}: {exc}; install pylibjpeg-openjpeg"
                ) from exc
            ds.compress(syntax, encoding_plugin=fallback, generate_instance_uid=False)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = ds.SOPClassUID
    meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    meta.TransferSyntaxUID = syntax
    meta.ImplementationClassUID = IMPLEMENTATION_CLASS_UID
    meta.ImplementationVersionName = "CHEXRETRIEVE"
    ds.file_meta = meta
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    ds.save_as(target, enforce_file_format=True)
    return target


#: identifies files written by chexretrieve (derived once from a fixed string)
IMPLEMENTATION_CLASS_UID = derive_uid("chexretrieve", "implementation", "1")
