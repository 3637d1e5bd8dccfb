"""The searchable gallery of one encoder (ids, embeddings, metadata, labels) and its filters."""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from chexretrieve.findings import FINDINGS, canonical_finding

#: metadata columns a gallery carries (others are kept but not required)
METADATA_COLUMNS = (
    "study_uid",
    "view_position",
    "patient_sex",
    "patient_age_years",
    "study_date",
    "split",
)


@dataclass(frozen=True, eq=False)
class Gallery:
    """Everything search needs about the archived images of one encoder, row-aligned.

    ``embeddings`` are the encoder's unit vectors (float32; float16 when the search service
    stores them so, see ``with_embeddings``); ``metadata`` and ``labels`` are indexed
    by image id in the same row order; labels hold 1 / 0 / -1 / NaN per finding (CheXpert names).
    """

    encoder_id: str
    image_ids: np.ndarray
    embeddings: np.ndarray
    metadata: pd.DataFrame
    labels: pd.DataFrame
    fingerprint: str = field(default="")

    def __post_init__(self) -> None:
        n = len(self.image_ids)
        if self.embeddings.ndim != 2 or self.embeddings.shape[0] != n:
            raise ValueError(
                f"gallery embeddings have shape {self.embeddings.shape}; expected ({n}, d) "
                "to match the image ids"
            )
        if len(self.metadata) != n or len(self.labels) != n:
            raise ValueError("gallery metadata and labels must have one row per image id")
        missing = [c for c in METADATA_COLUMNS if c not in self.metadata.columns]
        if missing:
            raise ValueError(f"gallery metadata lacks columns {missing}")
        if not self.fingerprint:
            object.__setattr__(self, "fingerprint", gallery_fingerprint(self))
        index = {int(i): row for row, i in enumerate(self.image_ids)}
        object.__setattr__(self, "_row_of", index)
        codes, _ = pd.factorize(self.metadata["study_uid"], use_na_sentinel=True)
        object.__setattr__(self, "study_codes", codes)

    def __len__(self) -> int:
        return len(self.image_ids)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def __contains__(self, image_id: object) -> bool:
        try:
            return int(image_id) in self._row_of  # type: ignore[attr-defined, arg-type]
        except (TypeError, ValueError):
            return False

    def row_of(self, image_id: int) -> int:
        """Row of an image id; ValueError naming the id when it is not in this gallery."""
        try:
            return self._row_of[int(image_id)]  # type: ignore[attr-defined]
        except KeyError:
            raise ValueError(
                f"case {image_id} is not in the archive for encoder {self.encoder_id!r}; "
                "pick an ingested case id (see `chexretrieve search --help`)"
            ) from None


def with_embeddings(gallery: Gallery, embeddings: np.ndarray) -> Gallery:
    """The same gallery over other storage of the same embedding rows (e.g. rounded to float16):
    ids, metadata, labels, fingerprint and row index are shared, nothing is recomputed."""
    if np.shape(embeddings) != gallery.embeddings.shape:
        raise ValueError(
            f"replacement embeddings have shape {np.shape(embeddings)}; the gallery's are "
            f"{gallery.embeddings.shape}"
        )
    stored = copy.copy(gallery)  # a shallow copy: __post_init__ does not run again
    object.__setattr__(stored, "embeddings", embeddings)
    return stored


def gallery_fingerprint(gallery: Gallery) -> str:
    """Changes whenever the archive (ids, embeddings) or the encoder changes."""
    digest = hashlib.sha256()
    digest.update(gallery.encoder_id.encode())
    digest.update(np.ascontiguousarray(gallery.image_ids, dtype=np.int64).tobytes())
    digest.update(str(gallery.embeddings.shape).encode())
    # a strided sample of the embedding bytes keeps this cheap for millions of rows
    step = max(1, len(gallery.image_ids) // 4096)
    digest.update(np.ascontiguousarray(gallery.embeddings[::step], dtype=np.float32).tobytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class SearchFilters:
    # views to keep (e.g. ("PA", "AP")); empty = all
    views: tuple[str, ...] = ()
    # 'M', 'F' or 'O'; None = all
    sex: str | None = None
    # youngest age in years to keep; None = no bound
    age_min: float | None = None
    # oldest age in years to keep; None = no bound
    age_max: float | None = None
    # earliest study date to keep; None = no bound
    date_from: dt.date | None = None
    # latest study date to keep; None = no bound
    date_to: dt.date | None = None
    # keep only images whose label for the searched finding is known (1, 0 or -1)
    label_known: bool = False

    def __post_init__(self) -> None:
        if self.sex is not None and self.sex not in ("M", "F", "O"):
            raise ValueError(f"sex filter must be 'M', 'F' or 'O', not {self.sex!r}")
        if self.age_min is not None and self.age_max is not None and self.age_min > self.age_max:
            raise ValueError(f"age range is empty: {self.age_min} > {self.age_max}")
        if self.date_from and self.date_to and self.date_from > self.date_to:
            raise ValueError(f"date range is empty: {self.date_from} is after {self.date_to}")


def filter_mask(gallery: Gallery, filters: SearchFilters, finding: str) -> np.ndarray:
    """Boolean row mask of the gallery rows that pass the filters."""
    meta = gallery.metadata
    mask = np.ones(len(gallery), dtype=bool)
    if filters.views:
        wanted = {v.upper() for v in filters.views}
        mask &= meta["view_position"].fillna("").str.upper().isin(wanted).to_numpy()
    if filters.sex:
        mask &= (meta["patient_sex"] == filters.sex).to_numpy()
    age = pd.to_numeric(meta["patient_age_years"], errors="coerce").to_numpy(dtype=float)
    if filters.age_min is not None:
        mask &= age >= filters.age_min
    if filters.age_max is not None:
        mask &= age <= filters.age_max
    if filters.date_from or filters.date_to:
        dates = pd.to_datetime(meta["study_date"], errors="coerce")
        if filters.date_from:
            mask &= (dates >= pd.Timestamp(filters.date_from)).to_numpy()
        if filters.date_to:
            mask &= (dates <= pd.Timestamp(filters.date_to)).to_numpy()
    if filters.label_known:
        name = canonical_finding(finding)
        mask &= gallery.labels[name].notna().to_numpy()
    return mask


def empty_labels(n: int) -> pd.DataFrame:
    """A labels frame of n rows, every finding blank."""
    return pd.DataFrame(np.full((n, len(FINDINGS)), np.nan), columns=list(FINDINGS))
