"""What a read-only DICOMweb endpoint sends for one archived file (pydicom stays in this package).

``web_instance(path, deidentify=...)`` reads one archived DICOM file through the same validated
reader as ingest and gives a :class:`WebInstance`:

- ``metadata``: the DICOM JSON model (PS3.18 F.2) of its header, as WADO-RS ``metadata`` and
  QIDO-RS answers carry it: no Pixel Data, no binary element over 1 KiB, and the Image Pixel
  module rewritten to describe the frame that is sent (decoded, native little endian);
- ``frame``: that frame's bytes (the stored values, decoded from any compressed transfer syntax,
  little endian, ``BitsAllocated`` 8 or 16), sent as ``application/octet-stream`` with
  ``transfer-syntax=1.2.840.10008.1.2.1``.

``deidentify=True`` applies :func:`deidentify_json`: names, identifiers, birth date, addresses,
institution, physicians and operators, free-text descriptions and comments, every person name
(PN), every private element and every sequence that is not needed to show the image are removed;
the patient id becomes a pseudonym derived from it (so two studies of one patient still group).
Kept: the UIDs (the DICOMweb addresses), sex, age, study date and time, view and the image
modules, which is what the case lookup shows every user.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chexretrieve.dicom.config import ReadConfig
from chexretrieve.dicom.pixels import decode_stored_pixels
from chexretrieve.dicom.read import _guarded, _validated_header

#: the transfer syntax of every frame sent: Explicit VR Little Endian (native, uncompressed)
FRAME_TRANSFER_SYNTAX = "1.2.840.10008.1.2.1"

#: attributes removed when de-identifying (keywords; PS3.15 E.1 basic profile, the identifying
#: subset that a chest-radiograph archive carries)
PHI_KEYWORDS = frozenset(
    {
        "PatientName", "PatientBirthDate", "PatientBirthTime", "PatientBirthName",
        "PatientAddress", "PatientTelephoneNumbers", "PatientMotherBirthName",
        "OtherPatientIDs", "OtherPatientNames", "OtherPatientIDsSequence", "IssuerOfPatientID",
        "MedicalRecordLocator", "PatientInsurancePlanCodeSequence", "MilitaryRank",
        "BranchOfService", "RegionOfResidence", "CountryOfResidence", "Occupation",
        "PatientReligiousPreference", "AdditionalPatientHistory", "PatientComments",
        "EthnicGroup", "AccessionNumber", "StudyID", "InstitutionName", "InstitutionAddress",
        "InstitutionalDepartmentName", "ReferringPhysicianName", "ReferringPhysicianAddress",
        "ReferringPhysicianTelephoneNumbers", "PerformingPhysicianName",
        "NameOfPhysiciansReadingStudy", "PhysiciansOfRecord", "RequestingPhysician",
        "OperatorsName", "StationName", "DeviceSerialNumber", "StudyDescription",
        "SeriesDescription", "ImageComments", "RequestedProcedureDescription",
        "PerformedProcedureStepDescription", "PerformedProcedureStepID",
        "RequestedProcedureID", "ScheduledProcedureStepID", "ContentCreatorName",
        "ProtocolName", "DerivationDescription", "AdmittingDiagnosesDescription",
        "PatientState", "ResponsibleOrganization", "ResponsiblePerson",
    }
)  # fmt: skip
#: sequences kept when de-identifying (needed to show the image)
KEPT_SEQUENCES = frozenset(
    {"VOILUTSequence", "ModalityLUTSequence", "PixelMeasuresSequence", "ViewCodeSequence"}
)


@dataclass(frozen=True)
class WebInstance:
    """One archived image as a DICOMweb endpoint serves it (see the module doc)."""

    # the DICOM JSON model of the header (tag "GGGGEEEE" -> {"vr", "Value"...})
    metadata: dict
    # the one frame's bytes (native little endian)
    frame: bytes
    # its addresses
    study_uid: str
    series_uid: str
    sop_uid: str


def web_instance(
    path: str | Path, config: ReadConfig | None = None, deidentify: bool = True
) -> WebInstance:
    """The DICOMweb view of one archived DICOM file; RejectedFile when it cannot be read."""
    config = config or ReadConfig()
    return _guarded(Path(path), lambda p, notes: _web_instance(p, config, notes, deidentify))


def _web_instance(path: Path, config: ReadConfig, notes: list[str], deidentify: bool):
    ds, _, module = _validated_header(path, config, notes, header_only=False)
    stored = decode_stored_pixels(ds, module, config)
    bits = 8 if stored.dtype.itemsize == 1 and module.bits_allocated <= 8 else 16
    signed = module.pixel_representation == 1
    dtype = np.dtype(("<i" if signed else "<u") + str(bits // 8))
    frame = np.ascontiguousarray(stored.astype(dtype)).tobytes()
    study, series, sop = (
        str(ds.get("StudyInstanceUID", "")),
        str(ds.get("SeriesInstanceUID", "")),
        str(ds.get("SOPInstanceUID", "")),
    )
    for keyword in ("PixelData", "FloatPixelData", "DoubleFloatPixelData"):
        if keyword in ds:
            del ds[keyword]
    if deidentify:
        ds.remove_private_tags()
    metadata = ds.to_json_dict(bulk_data_threshold=1024, bulk_data_element_handler=lambda e: "")
    metadata = {tag: value for tag, value in metadata.items() if "BulkDataURI" not in value}
    pixel_module = {
        "00280002": ("US", 1),  # SamplesPerPixel
        "00280004": ("CS", module.photometric),
        "00280010": ("US", module.rows),
        "00280011": ("US", module.columns),
        "00280100": ("US", bits),  # BitsAllocated
        "00280101": ("US", min(module.bits_stored, bits)),
        "00280102": ("US", min(module.bits_stored, bits) - 1),  # HighBit
        "00280103": ("US", module.pixel_representation),
        "00020010": ("UI", FRAME_TRANSFER_SYNTAX),
    }
    for tag, (vr, value) in pixel_module.items():
        metadata[tag] = {"vr": vr, "Value": [value]}
    metadata.pop("00280008", None)  # NumberOfFrames: one frame is served
    # VOI LUT Function LINEAR is the default; Cornerstone 3 rejects it spelt out ("Invalid VOI
    # LUT function") and would show nothing
    if (metadata.get("00281056", {}).get("Value") or [None])[0] == "LINEAR":
        del metadata["00281056"]
    # a spacing of zero or less (RG1 has 0\\0) is no spacing: OHIF would divide by it and place
    # the image nowhere; without it, it measures in pixels
    for tag in ("00280030", "00181164"):  # Pixel Spacing, Imager Pixel Spacing
        spacing = metadata.get(tag, {}).get("Value") or []
        if tag in metadata and not (len(spacing) == 2 and all(_positive(v) for v in spacing)):
            del metadata[tag]
    if deidentify:
        metadata = deidentify_json(metadata)
    return WebInstance(metadata, frame, study, series, sop)


def thumbnail_jpeg(
    path: str | Path, max_side: int = 128, config: ReadConfig | None = None
) -> bytes:
    """A JPEG of the file under its own default window (inverted when its low values show
    white), longer side at most ``max_side``: WADO-RS's ``thumbnail``."""
    import io

    from PIL import Image

    from chexretrieve.dicom.viewing import linear_window, read_pixel_values

    values = read_pixel_values(path, config, max_side * 4)
    grey = linear_window(values.values, values.default_center, values.default_width, values.invert)
    image = Image.fromarray(grey)
    image.thumbnail((max_side, max_side), Image.LANCZOS)
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=85)
    return out.getvalue()


def _positive(value) -> bool:
    try:
        return float(value) > 0
    except (TypeError, ValueError):
        return False


def _keyword_tags() -> tuple[frozenset[str], frozenset[str]]:
    from pydicom.datadict import tag_for_keyword

    def tags(keywords):
        return frozenset(f"{tag_for_keyword(k):08X}" for k in keywords if tag_for_keyword(k))

    return tags(PHI_KEYWORDS), tags(KEPT_SEQUENCES)


_PHI_TAGS, _KEPT_SEQUENCE_TAGS = _keyword_tags()
_PATIENT_ID = "00100020"


def pseudonym(patient_id: str) -> str:
    """A stable stand-in for a patient id (a SHA-256 prefix: the id is not recoverable from it
    without guessing the id itself)."""
    return "ANON-" + hashlib.sha256(f"chexretrieve:{patient_id}".encode()).hexdigest()[:12]


def deidentify_json(metadata: dict) -> dict:
    """A DICOM JSON header without the identifying attributes of the module doc."""
    kept = {}
    for tag, value in metadata.items():
        tag = tag.upper()
        group = int(tag[:4], 16)
        vr = value.get("vr")
        if tag in _PHI_TAGS or group % 2 == 1 or vr == "PN":
            continue
        if vr == "SQ" and tag not in _KEPT_SEQUENCE_TAGS:
            continue
        kept[tag] = value
    if _PATIENT_ID in metadata:
        original = (metadata[_PATIENT_ID].get("Value") or [""])[0]
        kept[_PATIENT_ID] = {"vr": "LO", "Value": [pseudonym(str(original))]}
    kept["00100010"] = {"vr": "PN", "Value": [{"Alphabetic": "de-identified"}]}
    kept["00120062"] = {"vr": "CS", "Value": ["YES"]}  # PatientIdentityRemoved
    return kept
