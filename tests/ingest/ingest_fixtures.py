"""Small synthetic archives for the ingest tests (DICOM files written with pydicom here)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import ExplicitVRLittleEndian, generate_uid

DX_STORAGE = "1.2.840.10008.5.1.4.1.1.1.1"
ROOT = "1.2.826.0.1.3680043.10.1234."


def uid(kind: int, index: int) -> str:
    return f"{ROOT}{kind}.{index}"


def write_dx(
    path: Path,
    index: int,
    *,
    size: int = 48,
    frames: int = 1,
    seed: int | None = None,
    study: int | None = None,
    sop_index: int | None = None,
    photometric: str = "MONOCHROME2",
) -> Path:
    """A small 12-bit DX radiograph whose pixels depend on ``seed`` (default: ``index``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(index if seed is None else seed)
    shape = (frames, size, size) if frames > 1 else (size, size)
    pixels = rng.integers(0, 4096, size=shape, dtype=np.uint16)
    meta = FileMetaDataset()
    meta.MediaStorageSOPClassUID = DX_STORAGE
    sop = uid(3, index if sop_index is None else sop_index)
    meta.MediaStorageSOPInstanceUID = sop
    meta.TransferSyntaxUID = ExplicitVRLittleEndian
    meta.ImplementationClassUID = generate_uid(prefix=ROOT)
    ds = FileDataset(str(path), {}, file_meta=meta, preamble=b"\0" * 128)
    ds.SOPClassUID = DX_STORAGE
    ds.SOPInstanceUID = sop
    ds.StudyInstanceUID = uid(1, index if study is None else study)
    ds.SeriesInstanceUID = uid(2, index)
    ds.PatientID = f"PAT{index % 7:03d}"
    ds.PatientSex = "F" if index % 2 else "M"
    ds.PatientAge = f"{30 + index % 50:03d}Y"
    ds.StudyDate = (dt.date(2021, 1, 1) + dt.timedelta(days=index)).strftime("%Y%m%d")
    ds.Modality = "DX"
    ds.ViewPosition = "PA" if index % 3 else "AP"
    ds.BodyPartExamined = "CHEST"
    ds.Manufacturer = "Test Imaging"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = photometric
    ds.Rows = size
    ds.Columns = size
    ds.BitsAllocated = 16
    ds.BitsStored = 12
    ds.HighBit = 11
    ds.PixelRepresentation = 0
    ds.PixelSpacing = [0.2, 0.2]
    if frames > 1:
        ds.NumberOfFrames = frames
    ds.PixelData = pixels.tobytes()
    ds.save_as(path, enforce_file_format=True)
    return path


def write_archive(folder: Path, n: int, *, size: int = 48, start: int = 0) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(start, start + n):
        sub = folder / f"patient{i % 4}"
        sub.mkdir(exist_ok=True)
        paths.append(write_dx(sub / f"image{i:04d}.dcm", i, size=size))
    return paths


def write_bad_files(folder: Path) -> dict[str, Path]:
    """One file per kind of bad input; returns {kind: path}."""
    folder.mkdir(parents=True, exist_ok=True)
    garbage = folder / "garbage.dcm"
    garbage.write_bytes(np.random.default_rng(7).bytes(3000))
    text = folder / "notes.dcm"
    text.write_text("this is a text file, not DICOM\n" * 20)
    empty = folder / "empty.dcm"
    empty.write_bytes(b"")
    good = write_dx(folder / "whole.dcm", 900, size=64)
    truncated = folder / "truncated.dcm"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size - 3000])
    good.unlink()
    multi = write_dx(folder / "multiframe.dcm", 901, frames=3)
    return {
        "garbage": garbage,
        "text": text,
        "empty": empty,
        "truncated": truncated,
        "multi-frame": multi,
    }


def misbehaving_reader(path, config):  # noqa: ANN001, ANN201
    """The real reader, except files named hang* never finish and crash* kill their process."""
    import os
    import time

    from chexretrieve.dicom import read_radiograph

    name = Path(path).name
    if name.startswith("hang"):
        time.sleep(3600)
    if name.startswith("crash"):
        os._exit(3)
    return read_radiograph(path, config)


class PickyEncoder:
    """Wraps an encoder and fails on any batch holding an image ``refused_rows`` rows tall."""

    def __init__(self, inner, refused_rows: int) -> None:
        self.inner = inner
        self.refused_rows = refused_rows
        self.encoder_id = inner.encoder_id
        self.embed_dim = inner.embed_dim
        self.inv_temperature = inner.inv_temperature
        self.calls = 0

    def embed_images(self, images):  # noqa: ANN001, ANN201
        self.calls += 1
        if any(image.shape[0] == self.refused_rows for image in images):
            raise RuntimeError(f"picky encoder refuses images with {self.refused_rows} rows")
        return self.inner.embed_images(images)

    def embed_texts(self, texts):  # noqa: ANN001, ANN201
        return self.inner.embed_texts(texts)


@dataclass(frozen=True)
class LargeImage:
    """What a reader returns, reduced to the parts the decode pool handles."""

    pixels: np.ndarray
    label: str


def large_image_reader(path, config):  # noqa: ANN001, ANN201
    """A float32 image of 1.4 to 2.6 MB (over the shared-memory threshold; sizes vary so blocks
    get replaced by larger ones) seeded by the number in the file name."""
    seed = int(Path(path).stem.rsplit("-", 1)[-1])
    side = 600 + 50 * (seed % 5)
    pixels = np.random.default_rng(seed).random((side, side + 3), dtype=np.float32)
    return LargeImage(pixels, Path(path).name)


@dataclass(frozen=True)
class TallRefusingPreprocess:
    """A picklable preprocessor (mean pooling to 8 x 8) refusing images ``refused_rows`` tall."""

    refused_rows: int

    def __call__(self, image):  # noqa: ANN001, ANN204
        if image.shape[0] == self.refused_rows:
            raise ValueError(f"{self.refused_rows}-row images are not accepted")
        rows, cols = (image.shape[0] // 8) * 8, (image.shape[1] // 8) * 8
        pooled = image[:rows, :cols].reshape(8, rows // 8, 8, cols // 8).mean(axis=(1, 3))
        return pooled.astype(np.float32)


class SplitEncoder:
    """An encoder with its preprocessing apart (``split_preprocessing``): a fixed projection of the
    8 x 8 pooled image; counts what ran in this process."""

    encoder_id = "split-test:1"
    embed_dim = 6
    inv_temperature = 10.0

    def __init__(self, refused_rows: int = -1) -> None:
        self.refused_rows = refused_rows
        self.projection = np.random.default_rng(0).standard_normal((64, 6)).astype(np.float32)
        self.preprocessed_here = 0
        self.model_calls = 0

    def image_preprocessor(self) -> TallRefusingPreprocess:
        return TallRefusingPreprocess(self.refused_rows)

    def embed_preprocessed(self, inputs):  # noqa: ANN001, ANN201
        self.model_calls += 1
        out = np.asarray(inputs, np.float32).reshape(len(inputs), 64) @ self.projection
        return out / np.linalg.norm(out, axis=1, keepdims=True)

    def embed_images(self, images):  # noqa: ANN001, ANN201
        preprocess = self.image_preprocessor()
        self.preprocessed_here += len(images)
        return self.embed_preprocessed(np.stack([preprocess(i) for i in images]))

    def embed_texts(self, texts):  # noqa: ANN001, ANN201
        raise NotImplementedError
