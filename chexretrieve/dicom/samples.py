"""One radiograph written in each transfer syntax an archive holds, for benchmarks and tests.

``write_sample(path, stored, syntax, metadata)`` writes ``stored`` (uint16 presentation values) as
a CR file in one of :data:`SAMPLE_SYNTAXES`:

- ``native``: Explicit VR Little Endian, 16 bits allocated;
- ``rle``: RLE Lossless (gdcm's encoder, pydicom's as a fallback);
- ``jpeg-lossless``: JPEG Lossless, Non-Hierarchical, First-Order Prediction (Process 14 SV1),
  encoded by gdcm;
- ``jpeg2000``: JPEG 2000 Lossless (openjpeg through pylibjpeg; five wavelet levels, so a decoder
  can stop at 1/2 ... 1/32 of the size);
- ``jpeg-baseline``: JPEG Baseline 8-bit (Process 1), the values scaled to 8 bits and encoded by
  Pillow's libjpeg at ``quality``; lossy, so read back within a few grey levels.

``write_jpeg_file(path, pixels8)`` writes the 8-bit greyscale JPEG file of CheXpert and
MIMIC-CXR-JPG. Clinical archives send these syntaxes; the writer of record for the application
(``chexretrieve.dicom.write``) keeps to the lossless ones.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from PIL import Image
from pydicom import dcmread
from pydicom.dataset import FileMetaDataset
from pydicom.encaps import encapsulate
from pydicom.uid import JPEGBaseline8Bit, JPEGLosslessSV1

from chexretrieve.dicom.write import IMPLEMENTATION_CLASS_UID, build_dataset, write_radiograph

#: transfer syntaxes ``write_sample`` produces, by short name
SAMPLE_SYNTAXES = ("native", "rle", "jpeg-lossless", "jpeg2000", "jpeg-baseline")
_WRITER_NAME = {"native": "explicit", "rle": "rle", "jpeg2000": "jpeg2000"}


def write_sample(
    path: str | os.PathLike[str],
    stored: np.ndarray,
    syntax: str,
    metadata: Mapping[str, object],
    *,
    bits_stored: int = 15,
    photometric: str = "MONOCHROME2",
    quality: int = 90,
) -> Path:
    """Write ``stored`` (uint16, at most ``bits_stored`` bits) in ``syntax``; returns the path."""
    if syntax not in SAMPLE_SYNTAXES:
        raise ValueError(f"syntax {syntax!r} is not one of {', '.join(SAMPLE_SYNTAXES)}")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    if syntax in _WRITER_NAME:
        return write_radiograph(
            target, stored, metadata, _WRITER_NAME[syntax], photometric, bits_stored
        )
    if syntax == "jpeg-lossless":
        return _write_jpeg_lossless(target, stored, metadata, bits_stored, photometric)
    return _write_jpeg_baseline(target, stored, metadata, bits_stored, photometric, quality)


def write_jpeg_file(path: str | os.PathLike[str], pixels8: np.ndarray, quality: int = 90) -> Path:
    """An 8-bit greyscale JPEG file (CheXpert / MIMIC-CXR-JPG style); returns the path."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(pixels8, dtype=np.uint8), mode="L").save(
        target, format="JPEG", quality=quality
    )
    return target


def _write_jpeg_lossless(
    target: Path, stored: np.ndarray, metadata: Mapping[str, object], bits: int, photometric: str
) -> Path:
    from chexretrieve.dicom.codec_setup import GDCM_AVAILABLE

    if not GDCM_AVAILABLE:
        raise RuntimeError("writing JPEG Lossless needs python-gdcm (the project's codec)")
    import gdcm

    with tempfile.TemporaryDirectory(prefix="chexretrieve-sample-") as tmp:
        native = write_radiograph(Path(tmp) / "native.dcm", stored, metadata, "explicit",
                                  photometric, bits)  # fmt: skip
        reader = gdcm.ImageReader()
        reader.SetFileName(str(native))
        if not reader.Read():
            raise RuntimeError(f"gdcm cannot read {native}")
        change = gdcm.ImageChangeTransferSyntax()
        change.SetTransferSyntax(gdcm.TransferSyntax(gdcm.TransferSyntax.JPEGLosslessProcess14_1))
        change.SetInput(reader.GetImage())
        if not change.Change():
            raise RuntimeError("gdcm could not encode JPEG Lossless")
        writer = gdcm.ImageWriter()
        writer.SetFileName(str(target))
        writer.SetFile(reader.GetFile())
        writer.SetImage(change.GetOutput())
        if not writer.Write():
            raise RuntimeError(f"gdcm could not write {target}")
    if dcmread(target, stop_before_pixels=True).file_meta.TransferSyntaxUID != JPEGLosslessSV1:
        raise RuntimeError("gdcm wrote another transfer syntax than JPEG Lossless SV1")
    return target


def _write_jpeg_baseline(
    target: Path,
    stored: np.ndarray,
    metadata: Mapping[str, object],
    bits: int,
    photometric: str,
    quality: int,
) -> Path:
    eight = np.rint(np.asarray(stored, dtype=np.float64) * (255.0 / ((1 << bits) - 1)))
    eight = eight.astype(np.uint16)
    ds = build_dataset(eight, metadata, photometric, bits_stored=8)
    values = np.asarray(np.frombuffer(ds.PixelData, dtype="<u2").reshape(eight.shape), np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(values, mode="L").save(buffer, format="JPEG", quality=quality)
    ds.BitsAllocated = 8
    ds.BitsStored = 8
    ds.HighBit = 7
    ds.LossyImageCompression = "01"
    ds.LossyImageCompressionMethod = "ISO_10918_1"
    ds.PixelData = encapsulate([buffer.getvalue()])
    ds["PixelData"].VR = "OB"
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = ds.SOPClassUID
    meta.MediaStorageSOPInstanceUID = ds.SOPInstanceUID
    meta.TransferSyntaxUID = JPEGBaseline8Bit
    meta.ImplementationClassUID = IMPLEMENTATION_CLASS_UID
    ds.file_meta = meta
    ds.save_as(target, enforce_file_format=True)
    return target
