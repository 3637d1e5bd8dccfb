"""Read one radiograph (DICOM, PNG or JPEG) tolerantly, validate it strictly, never crash.

Every way a file can fail ends in :class:`RejectedFile` with a stable ``reason`` code; an unexpected
exception inside pydicom or a codec becomes ``'decode-error'`` naming the exception type, so an
ingest run survives whatever an archive holds.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pydicom
from pydicom.datadict import dictionary_VR
from pydicom.dataset import Dataset
from pydicom.uid import DeflatedExplicitVRLittleEndian

from chexretrieve.dicom.config import ReadConfig
from chexretrieve.dicom.errors import RejectedFile
from chexretrieve.dicom.images import image_display_pixels, read_image_file
from chexretrieve.dicom.inflate import check_deflated_size
from chexretrieve.dicom.metadata import (
    RadiographMetadata,
    extract_metadata,
    get_element,
    optional_text,
    read_modality,
    sop_class_uid,
)
from chexretrieve.dicom.pixels import (
    check_pixel_budget,
    decode_stored_pixels,
    display_pixels,
    pixel_sha256,
    read_pixel_module,
    uid_from_sha256,
)

_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_SUFFIX_FORMAT = {
    ".dcm": "dicom",
    ".dicom": "dicom",
    ".dic": "dicom",
    ".png": "png",
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
}
_FORMAT_NAME = {"dicom": "DICOM", "png": "a PNG image", "jpeg": "a JPEG image"}
_PIXEL_DATA = 0x7FE00010
_UNDEFINED_LENGTH = 0xFFFFFFFF
_DEFER_BYTES = 16384
_MAX_NOTES = 20
_DICOMDIR_CLASS = "1.2.840.10008.1.3.10"
_STORAGE_ROOT = "1.2.840.10008.5.1.4.1.1."
# storage SOP class families (the component after the storage root) that hold no image: SR and key
# objects (88), presentation states (11), waveforms (9), encapsulated documents (104), raw data,
# registrations and segmentations (66), real world value maps (67), content assessments (90), and
# every RT object but RT Image (481 except 481.1)
_NON_IMAGE_CLASS_FAMILIES = frozenset({"88", "11", "9", "104", "66", "67", "90", "481"})
_NON_IMAGE_MODALITIES = frozenset(
    {"SR", "KO", "PR", "DOC", "REG", "FID", "SEG", "RTPLAN", "RTSTRUCT", "RTRECORD", "RTDOSE",
     "PLAN", "ECG", "HD", "AU", "RWV", "RESP", "EPS"}
)  # fmt: skip
_FOR_PROCESSING_CLASSES = frozenset(
    {
        "1.2.840.10008.5.1.4.1.1.1.1.1",
        "1.2.840.10008.5.1.4.1.1.1.2.1",
        "1.2.840.10008.5.1.4.1.1.1.3.1",
    }
)


@dataclass(frozen=True, eq=False)
class Radiograph:
    """One decoded radiograph."""

    pixels: np.ndarray  # float32 (rows, columns) in [0, 1], 0 = black, display-ready
    metadata: RadiographMetadata
    pixel_sha256: (
        str  # see chexretrieve.dicom.pixels.pixel_sha256 (stored values, before windowing)
    )
    warnings: tuple[str, ...] = ()  # what was tolerated while reading (at most 20 notes)
    # a small 8-bit PNG of the default display (chexretrieve.dicom.thumbnails), set by ingest
    thumbnail_png: bytes | None = None
    # source pixels per pixel of ``pixels`` along each side: 1 = full resolution; ingest reads at a
    # working resolution (chexretrieve.dicom.working) and the metadata keeps the full rows/columns
    scale: int = 1


# ---------------------------------------------------------------------------------- public API


def read_radiograph(path: str | os.PathLike[str], config: ReadConfig | None = None) -> Radiograph:
    """Read a DICOM, PNG or JPEG radiograph; raise :class:`RejectedFile` for anything unreadable."""
    config = config or ReadConfig()
    return _guarded(Path(path), lambda p, notes: _read(p, config, notes))


def read_dicom_header(
    path: str | os.PathLike[str], config: ReadConfig | None = None
) -> RadiographMetadata:
    """Validated metadata of a DICOM radiograph without decoding its pixels (cheap for ingest).

    Applies every check :func:`read_radiograph` makes from the header alone (format, object kind,
    modality, frames, pixel module, size cap, pixel data length, UIDs); only decoding is skipped.
    """
    config = config or ReadConfig()
    return _guarded(Path(path), lambda p, notes: _read_header(p, config, notes))


def pydicom_test_file(name: str) -> Path:
    """Path of a sample file shipped with pydicom or pydicom-data, e.g. ``'RG1_UNCI.dcm'``.

    Never downloads (pydicom's default would try GitHub for a name it lacks); ValueError if absent.
    """
    from pydicom.data import get_testdata_file

    found = get_testdata_file(name, download=False)
    if not isinstance(found, str):
        raise ValueError(
            f"{name!r} is not among pydicom's local test files; install pydicom-data "
            "(the dev extra) or check the name"
        )
    return Path(found)


# ---------------------------------------------------------------------------------- guard


def _guarded(path: Path, work):
    notes: list[str] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = work(path, notes)
        except RejectedFile as exc:
            raise RejectedFile(exc.reason, f"{path.name}: {exc.message}") from exc.__cause__
        except RecursionError as exc:
            raise RejectedFile(
                "too-deep", f"{path.name}: nested sequences too deep to parse ({exc})"
            ) from None
        except MemoryError as exc:
            raise RejectedFile(
                "too-large", f"{path.name}: ran out of memory while reading ({exc})"
            ) from None
        except Exception as exc:  # noqa: BLE001 - the promise: no exception but RejectedFile
            raise RejectedFile(
                "decode-error",
                f"{path.name}: unexpected {type(exc).__name__} while reading: {exc}; "
                "the file is probably corrupt, re-export it",
            ) from exc
    if isinstance(result, Radiograph):
        notes.extend(str(w.message) for w in caught)
        unique = tuple(dict.fromkeys(n.splitlines()[0] for n in notes if n))[:_MAX_NOTES]
        result = dataclasses.replace(result, warnings=unique)
    return result


# ---------------------------------------------------------------------------------- format sniffing


def sniff_format(head: bytes, file_size: int) -> str | None:
    """'dicom', 'png' or 'jpeg' from the first bytes of a file, or None when none fits."""
    if len(head) >= 132 and head[128:132] == b"DICM":
        return "dicom"
    if head.startswith(_PNG_SIGNATURE):
        return "png"
    if head.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if _looks_like_bare_dicom(head, file_size):
        return "dicom"
    return None


def _looks_like_bare_dicom(head: bytes, file_size: int) -> bool:
    """A dataset without the 128-byte preamble: starts with a group 0000/0002/0008 element."""
    if len(head) < 8:
        return False
    little_group, element = struct.unpack("<HH", head[:4])
    big_group = struct.unpack(">H", head[:2])[0]
    if little_group not in (0x0000, 0x0002, 0x0008) and big_group != 0x0008:
        return False
    if little_group == 0x0000 and element == 0x0000 and head[4:8] == b"\0\0\0\0":
        return False  # a run of zero bytes is not a header
    vr = head[4:6]
    if vr.isalpha() and vr.isupper():
        return True
    length = struct.unpack("<I" if big_group != 0x0008 else ">I", head[4:8])[0]
    return length <= file_size


def _open_checked(path: Path, config: ReadConfig) -> tuple[str, int]:
    """Stat and sniff a file; the format it holds, checked against its name and the config."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise RejectedFile("unreadable", "not a regular file (a folder or a device?)")
        with path.open("rb") as handle:
            head = handle.read(132)
    except OSError as exc:
        raise RejectedFile("unreadable", f"cannot read the file ({exc.strerror or exc})") from exc
    if size == 0:
        raise RejectedFile("empty-file", "the file has 0 bytes; the copy or export failed")
    if size > config.max_file_bytes:
        raise RejectedFile(
            "too-large",
            f"the file has {size:,} bytes, over ReadConfig.max_file_bytes = "
            f"{config.max_file_bytes:,}",
        )
    found = sniff_format(head, size)
    named = _SUFFIX_FORMAT.get(path.suffix.lower())
    if found is None:
        reason = "unsupported-format" if named in ("png", "jpeg") else "not-dicom"
        expected = _FORMAT_NAME[named] if named else "DICOM, PNG or JPEG"
        raise RejectedFile(
            reason,
            f"the content is not {expected} (first bytes {head[:16]!r}); "
            "this is not a radiograph file, remove it from the archive",
        )
    if named is not None and named != found:
        raise RejectedFile(
            "not-dicom" if named == "dicom" else "unsupported-format",
            f"named {path.suffix} but the content is {_FORMAT_NAME[found]}; "
            f"rename it to match its content if it belongs in the archive",
        )
    if found not in config.allowed_formats:
        raise RejectedFile(
            "unsupported-format",
            f"{_FORMAT_NAME[found]} files are not read (ReadConfig.allowed_formats = "
            f"{config.allowed_formats})",
        )
    return found, size


# ---------------------------------------------------------------------------------- DICOM dataset


def load_dicom(path: Path, config: ReadConfig, *, header_only: bool) -> Dataset:
    """Parse a DICOM file (``force=True``) and reject it when truncated or nested too deep."""
    size = path.stat().st_size
    check_deflated_size(path, config)  # pydicom would inflate a deflated body without a bound
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            ds = pydicom.dcmread(path, force=True, defer_size=_DEFER_BYTES if header_only else None)
        except (EOFError, struct.error) as exc:
            raise RejectedFile(
                "truncated", f"the file ends inside an element ({type(exc).__name__}: {exc})"
            ) from exc
        except (RecursionError, MemoryError):
            raise
        except Exception as exc:  # noqa: BLE001
            raise RejectedFile(
                "corrupt",
                f"the DICOM structure cannot be parsed ({type(exc).__name__}: {exc}); "
                "re-export the file from its source",
            ) from exc
    for warning in caught:
        text = str(warning.message)
        if "end of file" in text.lower() or "premature" in text.lower():
            raise RejectedFile("truncated", f"the file ends too early: {text.splitlines()[0]}")
        warnings.warn(text, UserWarning, stacklevel=2)  # re-raise for the caller's notes
    _check_truncation(ds, size)
    _check_sequence_depth(ds, config.max_sequence_depth)
    return ds


def _check_truncation(ds: Dataset, file_size: int) -> None:
    tags = list(ds.keys())
    if not tags:
        raise RejectedFile(
            "truncated", "no data elements follow the file meta information; the file is cut short"
        )
    last = ds.get_item(tags[-1])
    tell = getattr(last, "value_tell", None)
    length = getattr(last, "length", None)
    if tell is None or length is None or length == _UNDEFINED_LENGTH:
        return
    value = last.value
    present = len(value) if isinstance(value, bytes | bytearray) else None
    if present is not None and present < length:
        raise RejectedFile(
            "truncated",
            f"element {tags[-1]} declares {length:,} bytes but the file holds {present:,}; "
            "the file is cut short",
        )
    inflated = getattr(ds, "file_meta", {}).get("TransferSyntaxUID") == (
        DeflatedExplicitVRLittleEndian
    )
    if value is None and not inflated and tell + length > file_size:
        raise RejectedFile(
            "truncated",
            f"element {tags[-1]} declares {length:,} bytes but the file ends "
            f"{tell + length - file_size:,} bytes early; the file is cut short",
        )
    if not inflated and _PIXEL_DATA not in ds and tell + (present or length) < file_size:
        raise RejectedFile(
            "truncated", "the file ends inside an element header before any Pixel Data"
        )


def _is_sequence(ds: Dataset, tag) -> bool:
    vr = ds.get_item(tag).VR
    if vr in (None, "UN"):
        try:
            vr = dictionary_VR(tag)
        except KeyError:
            return False
    return vr == "SQ"


def _check_sequence_depth(ds: Dataset, limit: int) -> None:
    """Walk the sequences iteratively; reject nesting deeper than ``limit`` item levels."""
    stack: list[tuple[Dataset, int]] = [(ds, 0)]
    while stack:
        dataset, depth = stack.pop()
        for tag in list(dataset.keys()):
            if not _is_sequence(dataset, tag):
                continue
            if depth + 1 > limit:
                raise RejectedFile(
                    "too-deep",
                    f"sequences nest deeper than ReadConfig.max_sequence_depth = {limit} levels; "
                    "no radiograph needs that, the file is corrupt or hostile",
                )
            items = dataset[tag].value or []
            stack.extend((item, depth + 1) for item in items if isinstance(item, Dataset))


def _is_non_image_class(sop_class: str) -> bool:
    if not sop_class.startswith(_STORAGE_ROOT):
        return False
    rest = sop_class[len(_STORAGE_ROOT) :]
    return rest.split(".")[0] in _NON_IMAGE_CLASS_FAMILIES and rest != "481.1"


def check_object_kind(ds: Dataset, config: ReadConfig, notes: list[str]) -> str | None:
    """Reject non-images, pixel-less objects, other modalities, for-processing and multi-frame."""
    sop_class = sop_class_uid(ds, notes) or ""
    if sop_class == _DICOMDIR_CLASS or "DirectoryRecordSequence" in ds:
        raise RejectedFile(
            "non-image-object", "a DICOMDIR (media index), not an image; ingest the files it lists"
        )
    modality = read_modality(ds, notes)
    if _is_non_image_class(sop_class) or modality in _NON_IMAGE_MODALITIES:
        raise RejectedFile(
            "non-image-object",
            f"a non-image object (Modality {modality}, SOP class {sop_class or 'unknown'}); "
            "only radiographs are ingested",
        )
    if _PIXEL_DATA not in ds:
        floats = "FloatPixelData" in ds or "DoubleFloatPixelData" in ds
        raise RejectedFile(
            "unsupported-format" if floats else "no-pixel-data",
            "float pixel data is not read"
            if floats
            else "no Pixel Data element (if the file was cut short, re-export it)",
        )
    allowed = config.allowed_modalities
    if allowed is not None and modality not in allowed:
        raise RejectedFile(
            "modality",
            f"Modality {modality or '(missing)'} is not one of {', '.join(allowed)}; "
            "set ReadConfig.allowed_modalities to admit it",
        )
    intent = optional_text(ds, "PresentationIntentType", notes)
    for_processing = sop_class in _FOR_PROCESSING_CLASSES or (intent or "").upper() == (
        "FOR PROCESSING"
    )
    if for_processing and not config.allow_for_processing:
        raise RejectedFile(
            "for-processing",
            "a 'FOR PROCESSING' image (raw detector data, not meant for display); ingest the "
            "'FOR PRESENTATION' version or set ReadConfig.allow_for_processing",
        )
    frames_elem = get_element(ds, "NumberOfFrames", required=True, notes=notes)
    frames_value = frames_elem.value if frames_elem is not None else None
    if frames_value not in (None, ""):
        try:
            frames = int(frames_value)
        except (TypeError, ValueError):
            raise RejectedFile(
                "invalid-field", f"NumberOfFrames {frames_value!r} is not an integer"
            ) from None
        if frames < 1:
            raise RejectedFile("invalid-field", f"NumberOfFrames must be at least 1, got {frames}")
        if frames > 1:
            raise RejectedFile(
                "multi-frame",
                f"{frames} frames; only single-frame radiographs are read (split the frames first)",
            )
    return modality


def _pixel_data_length(ds: Dataset) -> int | None:
    """Bytes of Pixel Data present (encapsulated: the whole item stream); None when unknown."""
    raw = ds.get_item(_PIXEL_DATA)
    value = raw.value
    if isinstance(value, bytes | bytearray):
        return len(value)
    length = getattr(raw, "length", None)
    if value is None and length not in (None, _UNDEFINED_LENGTH):
        return int(length)  # deferred: _check_truncation made sure the file holds it
    return None


def _validated_header(
    path: Path, config: ReadConfig, notes: list[str], *, header_only: bool
) -> tuple[Dataset, RadiographMetadata, object]:
    ds = load_dicom(path, config, header_only=header_only)
    try:
        modality = check_object_kind(ds, config, notes)
        module = read_pixel_module(ds, notes)
        check_pixel_budget(module, _pixel_data_length(ds), config)
        metadata = extract_metadata(
            ds,
            rows=module.rows,
            columns=module.columns,
            photometric=module.photometric,
            modality=modality,
            transfer_syntax=str(module.transfer_syntax),
            notes=notes,
        )
    except (RejectedFile, RecursionError, MemoryError):
        raise
    except Exception as exc:  # noqa: BLE001 - pydicom converts elements lazily and may fail here
        raise RejectedFile(
            "corrupt",
            f"the DICOM header cannot be parsed ({type(exc).__name__}: {exc}); "
            "re-export the file from its source",
        ) from exc
    return ds, metadata, module


def _read_header(path: Path, config: ReadConfig, notes: list[str]) -> RadiographMetadata:
    found, _ = _open_checked(path, config)
    if found != "dicom":
        raise RejectedFile(
            "not-dicom", f"the content is {_FORMAT_NAME[found]}; read it with read_radiograph"
        )
    return _validated_header(path, config, notes, header_only=True)[1]


def _read(path: Path, config: ReadConfig, notes: list[str]) -> Radiograph:
    found, _ = _open_checked(path, config)
    if found != "dicom":
        return _read_image(path, found, config, notes)
    ds, metadata, module = _validated_header(path, config, notes, header_only=False)
    stored = decode_stored_pixels(ds, module, config)
    digest = pixel_sha256(stored)
    pixels = display_pixels(stored, ds, module, config, notes)
    return Radiograph(pixels=pixels, metadata=metadata, pixel_sha256=digest)


def _read_image(path: Path, found: str, config: ReadConfig, notes: list[str]) -> Radiograph:
    stored = read_image_file(path, found, config, notes)
    digest = pixel_sha256(stored)
    metadata = image_metadata(uid_from_sha256(digest), stored.shape, found)
    return Radiograph(pixels=image_display_pixels(stored), metadata=metadata, pixel_sha256=digest)


def image_metadata(uid: str, shape: tuple[int, int], found: str) -> RadiographMetadata:
    """The metadata of a PNG or JPEG file: one derived UID for study, series and image."""
    rows, columns = shape
    return RadiographMetadata(
        study_uid=uid,
        series_uid=uid,
        sop_uid=uid,
        patient_id=None,
        patient_sex=None,
        patient_age_years=None,
        study_date=None,
        view_position=None,
        manufacturer=None,
        body_part=None,
        photometric="MONOCHROME2",
        modality=None,
        rows=int(rows),
        columns=int(columns),
        pixel_spacing=None,
        transfer_syntax=None,
        source_format=found,
    )
