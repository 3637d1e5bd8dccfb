"""Plain records that go into and come out of the store (no SQLAlchemy object leaves it)."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import pandas as pd

from chexretrieve.findings import canonical_finding

#: accepted label values; NaN / None mean blank (finding not mentioned)
LABEL_VALUES = (1.0, 0.0, -1.0)


@dataclass(frozen=True)
class ImageRecord:
    """One radiograph's indexed metadata, as the store keeps it."""

    sop_uid: str
    study_uid: str
    pixel_sha256: str
    series_uid: str | None = None
    patient_id: str | None = None
    patient_sex: str | None = None
    patient_age_years: float | None = None
    study_date: dt.date | None = None
    view_position: str | None = None
    manufacturer: str | None = None
    body_part: str | None = None
    photometric: str | None = None
    modality: str | None = None
    pixel_rows: int | None = None
    pixel_columns: int | None = None
    pixel_spacing_row_mm: float | None = None
    pixel_spacing_col_mm: float | None = None
    transfer_syntax: str | None = None
    source_format: str | None = None
    source_path: str | None = None
    split: str | None = None
    accession_number: str | None = None
    window_center: float | None = None  # modality output units (after rescale), first window
    window_width: float | None = None
    view_group: str | None = None  # 'frontal' / 'lateral'; None = unknown
    dataset_path: str | None = None  # the path as the public data set names it
    dataset_study_id: str | None = None  # the data set's study id (MIMIC study_id, ...)


@dataclass(frozen=True)
class StoredImage(ImageRecord):
    """An image row read back, with its database id."""

    image_id: int = 0
    run_id: int | None = None
    ingested_at: dt.datetime | None = None


@dataclass(frozen=True)
class SourceStamp:
    """Where an image came from: file path, size and modification time (to skip unchanged files)."""

    path: str
    size_bytes: int
    mtime_ns: int


@dataclass
class BatchItem:
    """One decoded file for ``Store.write_batch``.

    ``record`` + ``embedding`` for a decoded image (``embedding`` may be None when the caller
    already knows the image and its embedding are stored); or ``known_image_id`` for a file whose
    stamp says it is unchanged since it was stored (nothing decoded).
    """

    path: str
    record: ImageRecord | None = None
    embedding: np.ndarray | None = None
    labels: Mapping[str, float | None] | None = None
    stamp: SourceStamp | None = None
    known_image_id: int | None = None
    # PNG of the image's default display (chexretrieve.dicom.thumbnail_png): stored with the image,
    # or added to an image already stored without one; (png bytes, max_side asked for)
    thumbnail: Thumbnail | None = None
    # image columns a data set's files set (split, patient_id, view_group, study_uid, ...): applied
    # to an image already stored too, so a re-ingest corrects them; None leaves them as they are
    annotation: Mapping[str, object] | None = None


@dataclass(frozen=True)
class Thumbnail:
    """A stored thumbnail: an 8-bit greyscale PNG at most ``max_side`` pixels on its longer side."""

    png: bytes
    max_side: int
    rows: int = 0  # filled in by the store from the PNG header when 0
    columns: int = 0


@dataclass(frozen=True)
class CaseRow:
    """One case of the case picker (``Store.find_cases``): metadata and every finding's label."""

    image_id: int
    accession_number: str | None
    view_position: str | None
    patient_sex: str | None
    patient_age_years: float | None
    study_date: dt.date | None
    # CheXpert name -> 1.0 / 0.0 / -1.0 / None (blank); empty when the image is unlabelled
    labels: dict[str, float | None]
    has_thumbnail: bool


@dataclass(frozen=True)
class CasePage:
    """One page of ``Store.find_cases``: ``total`` cases match, ``cases`` from ``offset`` on."""

    total: int
    offset: int
    limit: int
    cases: tuple[CaseRow, ...]


@dataclass(frozen=True)
class Outcome:
    """What happened to one file in an ingest run."""

    path: str
    outcome: str  # ingested | embedded | already-present | rejected | conflict
    reason: str | None = None
    detail: str | None = None
    sop_uid: str | None = None
    image_id: int | None = None


@dataclass(frozen=True)
class EncoderRecord:
    encoder_id: str
    name: str
    embed_dim: int
    inv_temperature: float


@dataclass(frozen=True)
class ImageFilter:
    """Metadata filters for a gallery; None means no restriction on that field."""

    view_positions: tuple[str, ...] | None = None
    sexes: tuple[str, ...] | None = None
    min_age_years: float | None = None
    max_age_years: float | None = None
    date_from: dt.date | None = None
    date_to: dt.date | None = None
    splits: tuple[str, ...] | None = None
    # keep only images whose label for this finding is known (1, 0 or -1; not blank, not unlabelled)
    labelled_for: str | None = None
    image_ids: tuple[int, ...] | None = None
    exclude_study_uids: tuple[str, ...] = field(default_factory=tuple)


class Gallery(NamedTuple):
    """One encoder's embeddings: row i of ``vectors`` belongs to ``image_ids[i]``."""

    image_ids: np.ndarray  # (n,) int64
    vectors: np.ndarray  # (n, d) float32, unit rows as the encoder produced them
    metadata: pd.DataFrame  # indexed by image_id, same order as image_ids


def normalise_labels(labels: Mapping[str, float | None]) -> dict[str, float | None]:
    """Canonical finding names -> 1.0 / 0.0 / -1.0 / None (blank); ValueError on anything else."""
    out: dict[str, float | None] = {}
    for name, value in labels.items():
        finding = canonical_finding(name)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            out[finding] = None
            continue
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ValueError(
                f"label for {finding!r} is {value!r}; expected 1, 0, -1 (uncertain) or blank"
            ) from None
        if number not in LABEL_VALUES:
            raise ValueError(
                f"label for {finding!r} is {value!r}; expected 1, 0, -1 (uncertain) or blank"
            )
        out[finding] = number
    return out


def vector_to_bytes(vector: np.ndarray, dim: int) -> bytes:
    """Validate one embedding (shape, finite) and encode it as little-endian float32."""
    array = np.asarray(vector)
    if array.ndim != 1 or array.shape[0] != dim:
        raise ValueError(f"embedding has shape {array.shape}; the encoder's dimension is ({dim},)")
    array = array.astype("<f4", copy=False)
    if not np.all(np.isfinite(array)):
        raise ValueError("embedding contains NaN or infinite values; the encoder output is broken")
    return array.tobytes()


def matrix_to_bytes(matrix: np.ndarray) -> tuple[bytes, int, int]:
    array = np.asarray(matrix)
    if array.ndim != 2 or array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"expected a non-empty (n, d) matrix, got shape {array.shape}")
    array = np.ascontiguousarray(array, dtype="<f4")
    if not np.all(np.isfinite(array)):
        raise ValueError("matrix contains NaN or infinite values")
    return array.tobytes(), array.shape[0], array.shape[1]


def bytes_to_matrix(blob: bytes, rows: int, dim: int) -> np.ndarray:
    if len(blob) != rows * dim * 4:
        raise ValueError(
            f"stored matrix has {len(blob)} bytes; {rows} x {dim} float32 needs {rows * dim * 4}"
        )
    return np.frombuffer(blob, dtype="<f4").reshape(rows, dim).astype(np.float32)
