"""Hostile DICOM files for the adversarial suite, crafted byte by byte where pydicom would refuse.

Every builder is deterministic (seeded) and cheap: a "bomb" is small on disk and only its header or
its deflate stream claims gigabytes.
"""

from __future__ import annotations

import functools
import io
import struct
import zlib
from pathlib import Path

import numpy as np
import pydicom
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.filebase import DicomBytesIO
from pydicom.filewriter import write_dataset, write_file_meta_info
from pydicom.uid import (
    DeflatedExplicitVRLittleEndian,
    ExplicitVRLittleEndian,
    RLELossless,
)

from chexretrieve.dicom.write import build_dataset, derive_uid, write_radiograph

MiB = 1 << 20
GiB = 1 << 30


def radiograph_metadata(seed: int, **overrides: object) -> dict[str, object]:
    """Valid metadata of one small CR radiograph (UIDs derived from ``seed``)."""
    meta: dict[str, object] = {
        "PatientID": f"ADV{seed:05d}",
        "PatientName": f"Adversarial^Case{seed}",
        "PatientSex": "F" if seed % 2 else "M",
        "PatientAge": f"{40 + seed % 50:03d}Y",
        "StudyInstanceUID": derive_uid("adv", seed, "study"),
        "SeriesInstanceUID": derive_uid("adv", seed, "series"),
        "SOPInstanceUID": derive_uid("adv", seed, "image"),
        "StudyDate": "20240102",
        "Modality": "CR",
        "ViewPosition": "PA",
        "Manufacturer": "Adversarial Test",
        "PixelSpacing": [0.2, 0.2],
    }
    meta.update(overrides)
    return meta


def seeded_pixels(seed: int, size: int = 32) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 4096, size=(size, size), dtype=np.uint16)


def write_small_radiograph(
    path: Path, seed: int, *, size: int = 32, syntax: str = "explicit", **overrides: object
) -> Path:
    """A valid small CR written by the project's own strict writer."""
    return write_radiograph(
        path, seeded_pixels(seed, size), radiograph_metadata(seed, **overrides), syntax
    )


def _resave(source: Path, target: Path, change) -> Path:  # noqa: ANN001
    ds = pydicom.dcmread(source)
    change(ds)
    ds.save_as(target)
    return target


def lying_size_header(folder: Path, name: str, syntax: str = "explicit", side: int = 65535) -> Path:
    """A 16 x 16 image whose header claims ``side`` x ``side`` pixels (native or RLE data)."""
    small = write_small_radiograph(folder / f".{name}.src", 1, size=16, syntax=syntax)

    def lie(ds: Dataset) -> None:
        ds.Rows = ds.Columns = side

    path = _resave(small, folder / name, lie)
    small.unlink()
    return path


def many_frames(folder: Path, name: str, frames: int = 100_000, syntax: str = "explicit") -> Path:
    """NumberOfFrames = ``frames`` on a 512 x 512 header whose pixel data holds one small frame."""
    small = write_small_radiograph(folder / f".{name}.src", 2, size=16, syntax=syntax)

    def lie(ds: Dataset) -> None:
        ds.NumberOfFrames = frames
        ds.Rows = ds.Columns = 512

    path = _resave(small, folder / name, lie)
    small.unlink()
    return path


def _explicit_le_bytes(ds: Dataset) -> bytes:
    buffer = DicomBytesIO()
    buffer.is_little_endian = True
    buffer.is_implicit_VR = False
    write_dataset(buffer, ds)
    return buffer.getvalue()


def _element_header(group: int, element: int, vr: bytes, length: int) -> bytes:
    if vr in (b"OB", b"OW", b"UN", b"SQ", b"UT", b"UC", b"UR", b"OF", b"OD", b"OL", b"OV"):
        return struct.pack("<HH2sHI", group, element, vr, 0, length)
    return struct.pack("<HH2sH", group, element, vr, length)


@functools.lru_cache(maxsize=4)
def _zero_run_blocks(chunk: int) -> bytes:
    """Raw-deflate bytes for ``chunk`` zero bytes that end byte-aligned with a reset dictionary,
    so the same bytes may be repeated to inflate to any multiple of ``chunk``."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    first = compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)
    second = compressor.compress(bytes(chunk)) + compressor.flush(zlib.Z_FULL_FLUSH)
    assert first == second, "zlib did not repeat itself after a full flush"
    return first


def deflate_bomb(folder: Path, name: str, inflated_bytes: int, *, hide: str) -> Path:
    """A Deflated Explicit VR Little Endian file whose body inflates to about ``inflated_bytes``.

    ``hide``: ``"pixels"``: the zeros are the Pixel Data of a header that claims a matching (huge)
    size; ``"private"``: the header is an honest 64 x 64 image and the zeros sit in one private OB
    element before the pixels (no size field gives them away); ``"split"``: the zeros are spread
    over many private 1 MiB elements, so every declared length is modest; ``"unparsed"``: raw
    zeros follow the header where the next element should start.
    """
    chunk = 16 * MiB
    repeats = max(1, inflated_bytes // chunk)
    zero_bytes = repeats * chunk
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    block = _zero_run_blocks(chunk)
    stream = io.BytesIO()

    def emit(data: bytes) -> None:
        stream.write(compressor.compress(data) + compressor.flush(zlib.Z_FULL_FLUSH))

    if hide == "pixels":
        side = int(np.sqrt(zero_bytes // 2))
        while side * side * 2 < zero_bytes:
            side += 1
        ds = build_dataset(seeded_pixels(4, 16), radiograph_metadata(4), "MONOCHROME2", 12)
        del ds.PixelData
        ds.Rows = ds.Columns = min(side, 65535)
        emit(_explicit_le_bytes(ds) + _element_header(0x7FE0, 0x0010, b"OW", zero_bytes))
        stream.write(block * repeats)
        tail = b""
    else:
        ds = build_dataset(seeded_pixels(3, 64), radiograph_metadata(3), "MONOCHROME2", 12)
        pixel_bytes = ds.PixelData
        del ds.PixelData
        ds.add_new(0x00090010, "LO", "ADVERSARIAL")
        if hide == "private":
            emit(_explicit_le_bytes(ds) + _element_header(0x0009, 0x1010, b"OB", zero_bytes))
            stream.write(block * repeats)
        elif hide == "split":  # 1 MiB private elements in groups 0009, 000B, ... (256 each)
            emit(_explicit_le_bytes(ds))
            small = _zero_run_blocks(MiB)
            for index in range(zero_bytes // MiB):
                group, element = 0x0009 + 2 * (index // 256), 0x1000 + index % 256
                emit(_element_header(group, element, b"OB", MiB))
                stream.write(small)
        elif hide == "unparsed":  # zeros where the next element header should be
            emit(_explicit_le_bytes(ds))
            stream.write(block * repeats)
        else:
            raise ValueError(f"hide must be pixels, private, split or unparsed, not {hide!r}")
        tail = _element_header(0x7FE0, 0x0010, b"OW", len(pixel_bytes)) + pixel_bytes
    stream.write(compressor.compress(tail) + compressor.flush(zlib.Z_FINISH))
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = ds.SOPClassUID
    meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    meta.TransferSyntaxUID = DeflatedExplicitVRLittleEndian
    meta.ImplementationClassUID = derive_uid("adv", "implementation")
    meta_buffer = DicomBytesIO()
    meta_buffer.is_little_endian = True
    meta_buffer.is_implicit_VR = False
    write_file_meta_info(meta_buffer, meta, enforce_standard=True)
    path = folder / name
    path.write_bytes(b"\0" * 128 + b"DICM" + meta_buffer.getvalue() + stream.getvalue())
    return path


def honest_deflate(folder: Path, name: str, seed: int = 5, size: int = 64) -> Path:
    """A genuine deflate-syntax radiograph (must still be read after any bomb fix)."""
    return write_small_radiograph(folder / name, seed, size=size, syntax="deflate")


# ------------------------------------------------------------------------------ syntaxes in use

NATIVE = ExplicitVRLittleEndian
RLE = RLELossless


# ------------------------------------------------------------------------------ structure


def nested_sequences(depth: int, *, implicit: bool) -> bytes:
    """``depth`` nested (0040,A730) Content Sequences with undefined lengths, as element bytes."""
    if implicit:
        head = struct.pack("<HHI", 0x0040, 0xA730, 0xFFFFFFFF)
    else:
        head = struct.pack("<HH2sHI", 0x0040, 0xA730, b"SQ", 0, 0xFFFFFFFF)
    item = struct.pack("<HHI", 0xFFFE, 0xE000, 0xFFFFFFFF)
    closing = struct.pack("<HHI", 0xFFFE, 0xE00D, 0) + struct.pack("<HHI", 0xFFFE, 0xE0DD, 0)
    return (head + item) * depth + closing * depth


def insert_before_pixels(data: bytes, extra: bytes) -> bytes:
    position = data.rfind(struct.pack("<HH", 0x7FE0, 0x0010))
    assert position > 0, "no Pixel Data tag found"
    return data[:position] + extra + data[position:]


def deeply_nested(folder: Path, name: str, depth: int, syntax: str = "explicit") -> Path:
    """A valid small radiograph with ``depth`` nested sequences before its pixels."""
    if syntax == "implicit":
        ds = pydicom.dcmread(write_small_radiograph(folder / f".{name}.src", 7))
        ds.file_meta.TransferSyntaxUID = "1.2.840.10008.1.2"
        source = folder / f".{name}.implicit"
        ds.save_as(source, implicit_vr=True, little_endian=True)
    elif syntax == "deflate":
        source = write_small_radiograph(folder / f".{name}.src", 7, syntax="deflate")
        ds = pydicom.dcmread(source)
        buffer = DicomBytesIO()
        buffer.is_little_endian, buffer.is_implicit_VR = True, False
        write_dataset(buffer, ds)
        body = insert_before_pixels(buffer.getvalue(), nested_sequences(depth, implicit=False))
        compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
        meta = DicomBytesIO()
        meta.is_little_endian, meta.is_implicit_VR = True, False
        write_file_meta_info(meta, ds.file_meta, enforce_standard=True)
        path = folder / name
        path.write_bytes(
            b"\0" * 128 + b"DICM" + meta.getvalue() + compressor.compress(body) + compressor.flush()
        )
        source.unlink()
        return path
    else:
        source = write_small_radiograph(folder / f".{name}.src", 7)
    data = source.read_bytes()
    source.unlink()
    (folder / f".{name}.src").unlink(missing_ok=True)
    path = folder / name
    path.write_bytes(
        insert_before_pixels(data, nested_sequences(depth, implicit=syntax == "implicit"))
    )
    return path


def element_bytes(group: int, element: int, vr: bytes, value: bytes) -> bytes:
    """One explicit VR little endian element (any two bytes as VR; long form for long VRs)."""
    return _element_header(group, element, vr, len(value)) + value


def with_vr(data: bytes, group: int, element: int, old_vr: bytes, new_vr: bytes) -> bytes:
    """``data`` with the VR bytes of the one (group, element) header written as ``old_vr``
    replaced by ``new_vr`` (the length field stays as it is)."""
    needle = struct.pack("<HH2s", group, element, old_vr)
    assert data.count(needle) == 1, f"({group:04X},{element:04X}) {old_vr!r} is not unique"
    position = data.find(needle)
    return data[: position + 4] + new_vr + data[position + 6 :]


# ------------------------------------------------------------------------------ markup

#: markup and template payloads; each sets window.__xss (or adds an element) if it ever runs
MARKUP = (
    "<script>window.__xss=1</script>",
    "<img src=x onerror=window.__xss=2>",
    '"><svg onload=window.__xss=3>',
    "<b id=injected-b>bold</b>",
    "<iframe srcdoc='<script>parent.__xss=5</script>'>",
    "[link](javascript:window.__xss=6)",
    "{{7*7}} ${7*7} | td | </td></tr></table>",
    "javascript:window.__xss=4",
)
#: elements whose value the reader validates (UIDs, pixel module, dates, numbers): kept valid
_KEEP = {
    "SOPClassUID",
    "SOPInstanceUID",
    "StudyInstanceUID",
    "SeriesInstanceUID",
    "Modality",
    "PhotometricInterpretation",
    "SpecificCharacterSet",
    "PatientAge",
    "RescaleType",
    "PresentationIntentType",
    "PresentationLUTShape",
    "VOILUTFunction",
    "LossyImageCompression",
    "BurnedInAnnotation",
    "ImageType",
    "PatientOrientation",
}
_FREE_TEXT_VRS = {"AE", "CS", "LO", "LT", "PN", "SH", "ST", "UC", "UT", "UR"}
_EXTRA_TEXT = (
    "StudyDescription",
    "SeriesDescription",
    "InstitutionName",
    "ProtocolName",
    "InstitutionalDepartmentName",
    "OperatorsName",
    "PerformingPhysicianName",
    "AdditionalPatientHistory",
    "ImageComments",
    "DerivationDescription",
    "RequestedProcedureDescription",
    "PatientComments",
)


def markup_everywhere(path: Path, seed: int) -> list[str]:
    """A valid radiograph whose every free-text element carries one of ``MARKUP``; returns the
    keywords that were set."""
    import warnings

    from pydicom.datadict import dictionary_VR

    source = write_small_radiograph(path, seed, size=48)
    ds = pydicom.dcmread(source)
    touched = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # values too long or odd for their VR, on purpose
        for keyword in _EXTRA_TEXT:
            ds.add_new(keyword, dictionary_VR(keyword), "x")
        for index, elem in enumerate(e for e in ds.iterall() if e.VR in _FREE_TEXT_VRS):
            if elem.keyword in _KEEP:
                continue
            elem.value = MARKUP[index % len(MARKUP)]
            touched.append(elem.keyword or str(elem.tag))
        ds.ViewPosition = "<svg onload=x>"  # shown in result tables; CS allows 16 characters
        ds.BodyPartExamined = MARKUP[1]
        ds.Manufacturer = MARKUP[0]
        ds.save_as(path)
    return touched
