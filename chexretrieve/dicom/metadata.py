"""The metadata ingest indexes, from a DICOM header: strict where we rely on a field, else lenient.

Required fields (UIDs, the image pixel module) that are absent or malformed reject the file.
Descriptive fields (sex, age, dates, view, manufacturer) that cannot be parsed become ``None`` and
leave a warning, so one odd vendor string never loses an image.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from pydicom.dataelem import DataElement
from pydicom.dataset import Dataset

from chexretrieve.dicom.errors import RejectedFile

_UID_PATTERN = re.compile(r"[0-9]+(\.[0-9]+)+")
_STRICT_UID_PATTERN = re.compile(r"(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*))+")
_AGE_PATTERN = re.compile(r"(\d{1,3})\s*([DWMY]?)")
_DAYS_PER_YEAR = 365.25
_MAX_AGE_YEARS = 150.0
_MAX_TEXT_CHARS = 256

# SOP classes whose Modality is unambiguous when a file omits (0008,0060)
_MODALITY_BY_SOP_CLASS = {
    "1.2.840.10008.5.1.4.1.1.1": "CR",
    "1.2.840.10008.5.1.4.1.1.1.1": "DX",
    "1.2.840.10008.5.1.4.1.1.1.1.1": "DX",
}


@dataclass(frozen=True)
class RadiographMetadata:
    """What ingest indexes about one radiograph (DICOM, PNG or JPEG)."""

    study_uid: str
    series_uid: str
    sop_uid: str
    patient_id: str | None
    patient_sex: str | None  # 'M', 'F', 'O' or None
    patient_age_years: float | None
    study_date: dt.date | None
    view_position: str | None  # e.g. 'PA', 'AP', 'LL'
    manufacturer: str | None
    body_part: str | None
    photometric: str  # 'MONOCHROME1' or 'MONOCHROME2' as stored
    modality: str | None
    rows: int
    columns: int
    pixel_spacing: tuple[float, float] | None  # (row spacing, column spacing) in mm
    transfer_syntax: str | None  # transfer syntax UID; None for PNG/JPEG
    source_format: str  # 'dicom', 'png' or 'jpeg'
    accession_number: str | None = None  # AccessionNumber (an identifier: never shown, searchable)
    # the first Window Center / Width of the file, in modality output units (stored values after
    # Rescale Slope / Intercept, the units DICOM defines them in); None when absent or invalid
    window_center: float | None = None
    window_width: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dictionary (dates as ISO strings, spacing as a list)."""
        out = asdict(self)
        out["study_date"] = self.study_date.isoformat() if self.study_date else None
        out["pixel_spacing"] = list(self.pixel_spacing) if self.pixel_spacing else None
        return out


# ---------------------------------------------------------------------------------- element access


def get_element(
    ds: Dataset, keyword: str, *, required: bool, notes: list[str]
) -> DataElement | None:
    """The element ``keyword`` of ``ds``, or None when absent (or unparseable and not required)."""
    try:
        if keyword not in ds:
            return None
        return ds[keyword]
    except RecursionError:
        raise
    except Exception as exc:  # noqa: BLE001 - pydicom raises many types on malformed values
        problem = f"{keyword} cannot be parsed ({type(exc).__name__}: {exc})"
        if required:
            raise RejectedFile(
                "invalid-field", f"{problem}; the file is malformed, re-export it from the source"
            ) from exc
        notes.append(f"{problem}; ignored")
        return None


def required_int(
    ds: Dataset, keyword: str, *, vrs: tuple[str, ...], low: int, high: int, notes: list[str]
) -> int:
    """A required single integer element with one of ``vrs`` and a value in [low, high]."""
    elem = get_element(ds, keyword, required=True, notes=notes)
    if elem is None or elem.value is None or elem.value == "":
        raise RejectedFile(
            "missing-field", f"{keyword} is missing; a radiograph needs it to decode its pixels"
        )
    if elem.VR not in vrs:
        raise RejectedFile(
            "invalid-field",
            f"{keyword} has VR {elem.VR}, expected {'/'.join(vrs)}; the file is malformed",
        )
    value = elem.value
    if isinstance(value, bool) or not isinstance(value, int):
        raise RejectedFile(
            "invalid-field", f"{keyword} must be a single integer, got {_short(value)}"
        )
    if not low <= value <= high:
        raise RejectedFile("invalid-field", f"{keyword} must be in {low}..{high}, got {value}")
    return int(value)


def optional_int(
    ds: Dataset, keyword: str, *, default: int, low: int, high: int, notes: list[str]
) -> int:
    """An integer element that may be absent (then ``default``) but, when present, must be valid."""
    elem = get_element(ds, keyword, required=True, notes=notes)
    if elem is None or elem.value is None or elem.value == "":
        return default
    value = elem.value
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RejectedFile(
            "invalid-field", f"{keyword} must be an integer in {low}..{high}, got {_short(value)}"
        )
    return int(value)


def optional_text(ds: Dataset, keyword: str, notes: list[str]) -> str | None:
    """A descriptive text element as a stripped string, or None when absent, empty or garbage."""
    elem = get_element(ds, keyword, required=False, notes=notes)
    if elem is None:
        return None
    if elem.VR == "SQ":  # its text would be a dump of the nested datasets
        notes.append(f"{keyword} has VR SQ where text is expected; ignored")
        return None
    text = element_text(elem.value)
    if text is None:
        return None
    if len(text) > _MAX_TEXT_CHARS:
        notes.append(f"{keyword} is {len(text)} characters long, which no valid value is; ignored")
        return None
    return text


def element_text(value: Any) -> str | None:
    """Any element value as one stripped string (multiple values joined by a backslash)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        text = bytes(value).decode("latin-1")
    elif isinstance(value, list | tuple) or type(value).__name__ == "MultiValue":
        text = "\\".join(str(v) for v in value)
    else:
        text = str(value)
    text = text.strip(" \x00\t\r\n")
    return text or None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------------------------- UIDs


def parse_uid(value: Any, keyword: str, notes: list[str]) -> str:
    """A UID in valid syntax (digits and dots, at most 64 characters), else RejectedFile."""
    text = element_text(value)
    if text is None:
        raise RejectedFile(
            "missing-field", f"{keyword} is missing or empty; every DICOM instance needs one"
        )
    if len(text) > 64 or not _UID_PATTERN.fullmatch(text):
        raise RejectedFile(
            "invalid-field",
            f"{keyword} {_short(text)} is not a valid UID (digits and dots, at most 64 characters)",
        )
    if not _STRICT_UID_PATTERN.fullmatch(text):
        notes.append(f"{keyword} {text} has a component with a leading zero (tolerated)")
    return text


def read_uid(ds: Dataset, keyword: str, notes: list[str], fallback: Any = None) -> str:
    elem = get_element(ds, keyword, required=True, notes=notes)
    value = elem.value if elem is not None else None
    if element_text(value) is None and fallback is not None:
        notes.append(f"{keyword} is missing; used the file meta information's copy")
        value = fallback
    if elem is not None and elem.VR not in ("UI", "UN") and element_text(value) is not None:
        raise RejectedFile("invalid-field", f"{keyword} has VR {elem.VR}, expected UI")
    return parse_uid(value, keyword, notes)


# ---------------------------------------------------------------------------------- dates and ages


def parse_date(value: Any) -> dt.date | None:
    """A DICOM DA value (YYYYMMDD; the old YYYY.MM.DD and ISO YYYY-MM-DD too) or None."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    text = element_text(value)
    if text is None:
        return None
    digits = text.replace(".", "").replace("-", "")
    if len(digits) != 8 or not digits.isdigit():
        return None
    try:
        date = dt.date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))
    except ValueError:
        return None
    return date if date.year >= 1800 else None


def parse_age_string(text: str | None) -> float | None:
    """Age in years from a DICOM AS value '065Y', '006M', '010W', '003D' (bare number = years)."""
    if text is None:
        return None
    match = _AGE_PATTERN.fullmatch(text.strip().upper())
    if match is None:
        return None
    number = int(match.group(1))
    per_year = {"D": _DAYS_PER_YEAR, "W": _DAYS_PER_YEAR / 7.0, "M": 12.0, "Y": 1.0, "": 1.0}
    years = number / per_year[match.group(2)]
    return years if years <= _MAX_AGE_YEARS else None


def age_from_dates(birth: dt.date | None, on: dt.date | None) -> float | None:
    """Age in years on date ``on`` for someone born on ``birth`` (None if either is unknown)."""
    if birth is None or on is None:
        return None
    years = (on - birth).days / _DAYS_PER_YEAR
    return years if 0.0 <= years <= _MAX_AGE_YEARS else None


def read_study_date(ds: Dataset, notes: list[str]) -> dt.date | None:
    for keyword in ("StudyDate", "SeriesDate", "AcquisitionDate", "ContentDate"):
        elem = get_element(ds, keyword, required=False, notes=notes)
        if elem is None or element_text(elem.value) is None:
            continue
        date = parse_date(elem.value)
        if date is None:
            notes.append(f"{keyword} {_short(elem.value)} is not a date; ignored")
            continue
        if keyword != "StudyDate":
            notes.append(f"StudyDate is missing; used {keyword}")
        return date
    return None


def read_age_years(ds: Dataset, study_date: dt.date | None, notes: list[str]) -> float | None:
    text = optional_text(ds, "PatientAge", notes)
    if text is not None:
        years = parse_age_string(text)
        if years is not None:
            if text.strip().isdigit():
                notes.append(f"PatientAge {text!r} has no unit; read as years")
            return years
        notes.append(f"PatientAge {text!r} is not an age string such as '065Y'; ignored")
    birth_elem = get_element(ds, "PatientBirthDate", required=False, notes=notes)
    birth = parse_date(birth_elem.value) if birth_elem is not None else None
    return age_from_dates(birth, study_date)


def read_sex(ds: Dataset, notes: list[str]) -> str | None:
    text = optional_text(ds, "PatientSex", notes)
    if text is None:
        return None
    code = {"M": "M", "MALE": "M", "F": "F", "FEMALE": "F", "O": "O", "OTHER": "O"}.get(
        text.upper()
    )
    if code is None:
        notes.append(f"PatientSex {text!r} is not M, F or O; ignored")
    return code


# ---------------------------------------------------------------------------- spacing, modality


def read_pixel_spacing(ds: Dataset, notes: list[str]) -> tuple[float, float] | None:
    """PixelSpacing (strict when present), else ImagerPixelSpacing (lenient), else None.

    ``0\\0`` is a common placeholder for "not calibrated" and reads as unknown, with a note.
    """
    for keyword, strict in (("PixelSpacing", True), ("ImagerPixelSpacing", False)):
        elem = get_element(ds, keyword, required=strict, notes=notes)
        if elem is None or elem.value is None or elem.value == "":
            continue
        numbers = _two_numbers(elem.value)
        if numbers == (0.0, 0.0):
            notes.append(f"{keyword} is 0\\0 (not calibrated); read as unknown")
            continue
        if numbers is not None and all(math.isfinite(v) and v > 0 for v in numbers):
            return numbers
        problem = (
            f"{keyword} must be two positive numbers (row\\column mm), got {_short(elem.value)}"
        )
        if strict:
            raise RejectedFile("invalid-field", problem)
        notes.append(problem + "; ignored")
    return None


def read_window(ds: Dataset, notes: list[str]) -> tuple[float | None, float | None]:
    """The first (Window Center, Window Width) pair, or (None, None) when absent or unusable
    (a width below 1 or a value that is not a finite number leaves a note)."""
    values = []
    for keyword in ("WindowCenter", "WindowWidth"):
        elem = get_element(ds, keyword, required=False, notes=notes)
        if elem is None or elem.value is None or elem.value == "":
            return None, None
        value = elem.value
        if isinstance(value, list | tuple) or type(value).__name__ == "MultiValue":
            value = value[0] if len(value) else None
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            number = math.nan
        values.append(number)
    center, width = values
    if not (math.isfinite(center) and math.isfinite(width) and width >= 1):
        notes.append(f"Window Center/Width {center}/{width} is not usable; ignored")
        return None, None
    return center, width


def _two_numbers(value: Any) -> tuple[float, float] | None:
    if isinstance(value, str | bytes) or not hasattr(value, "__len__") or len(value) != 2:
        return None
    try:
        return (float(value[0]), float(value[1]))
    except (TypeError, ValueError):
        return None


def read_modality(ds: Dataset, notes: list[str]) -> str | None:
    """Modality upper-cased; when absent, inferred from a CR/DX SOP class (with a note)."""
    text = optional_text(ds, "Modality", notes)
    if text is not None:
        return text.upper()
    sop_class = sop_class_uid(ds, notes)
    inferred = _MODALITY_BY_SOP_CLASS.get(sop_class or "")
    if inferred is not None:
        notes.append(f"Modality is missing; inferred {inferred} from the SOP class")
    return inferred


def sop_class_uid(ds: Dataset, notes: list[str]) -> str | None:
    text = optional_text(ds, "SOPClassUID", notes)
    if text is None:
        meta = getattr(ds, "file_meta", None)
        if meta is not None:
            text = optional_text(meta, "MediaStorageSOPClassUID", notes)
    return text


def extract_metadata(
    ds: Dataset,
    *,
    rows: int,
    columns: int,
    photometric: str,
    modality: str | None,
    transfer_syntax: str | None,
    notes: list[str],
) -> RadiographMetadata:
    """All indexed metadata of a DICOM dataset whose pixel module was already validated."""
    meta = getattr(ds, "file_meta", None)
    meta_sop = meta.get("MediaStorageSOPInstanceUID") if meta is not None else None
    study_date = read_study_date(ds, notes)
    view = optional_text(ds, "ViewPosition", notes)
    window = read_window(ds, notes)
    return RadiographMetadata(
        study_uid=read_uid(ds, "StudyInstanceUID", notes),
        series_uid=read_uid(ds, "SeriesInstanceUID", notes),
        sop_uid=read_uid(ds, "SOPInstanceUID", notes, fallback=meta_sop),
        patient_id=optional_text(ds, "PatientID", notes),
        patient_sex=read_sex(ds, notes),
        patient_age_years=read_age_years(ds, study_date, notes),
        study_date=study_date,
        view_position=view.upper() if view else None,
        manufacturer=optional_text(ds, "Manufacturer", notes),
        body_part=optional_text(ds, "BodyPartExamined", notes),
        photometric=photometric,
        modality=modality,
        rows=rows,
        columns=columns,
        pixel_spacing=read_pixel_spacing(ds, notes),
        transfer_syntax=transfer_syntax,
        source_format="dicom",
        accession_number=optional_text(ds, "AccessionNumber", notes),
        window_center=window[0],
        window_width=window[1],
    )
