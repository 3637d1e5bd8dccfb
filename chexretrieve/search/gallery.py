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


class RowLookup:
    """``in`` and ``row_of`` over a gallery's ``_find(image id) -> row or None``."""

    encoder_id: str

    def _find(self, image_id: object) -> int | None:
        raise NotImplementedError

    def __contains__(self, image_id: object) -> bool:
        return self._find(image_id) is not None

    def row_of(self, image_id: int) -> int:
        """Row of an image id; ValueError naming the id when it is not in this gallery."""
        row = self._find(image_id)
        if row is None:
            raise ValueError(
                f"case {image_id} is not in the archive for encoder {self.encoder_id!r}; "
                "pick an ingested case id (see `chexretrieve search --help`)"
            )
        return row


@dataclass(frozen=True, eq=False)
class Gallery(RowLookup):
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
        # id -> row by binary search over the sorted ids (a dict of a million Python ints holds
        # ~100 MB; this holds none when the ids come sorted, as the store returns them)
        ids = np.asarray(self.image_ids, dtype=np.int64)
        order = None
        if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):
            order = np.argsort(ids, kind="stable")  # equal ids: the last row wins, as in a dict
            ids = ids[order]
        object.__setattr__(self, "_sorted_ids", ids)
        object.__setattr__(self, "_sorted_rows", order)
        object.__setattr__(self, "columns", GalleryColumns(self.metadata, self.labels))
        object.__setattr__(self, "study_codes", self.columns.codes("study_uid")[0])

    def __len__(self) -> int:
        return len(self.image_ids)

    @property
    def dim(self) -> int:
        return int(self.embeddings.shape[1])

    def _find(self, image_id: object) -> int | None:
        return find_row(self._sorted_ids, self._sorted_rows, image_id)  # type: ignore[attr-defined]

    # -------------------------------------------- what the search service and the UI read
    # (chexretrieve.index.IndexGallery offers the same over memory-mapped files)
    def has_column(self, name: str) -> bool:
        return name in self.metadata.columns

    def value(self, name: str, row: int):
        """One metadata value of one row."""
        return _native(self.metadata[name].iloc[int(row)])

    def metadata_of(self, image_id: int) -> dict:
        return self.metadata.loc[int(image_id)].to_dict()

    def labels_of(self, image_id: int) -> dict:
        return self.labels.loc[int(image_id)].to_dict()

    def label_values(self, finding: str) -> np.ndarray | None:
        """One finding's labels over every row (1 / 0 / -1, NaN blank); None without them."""
        name = canonical_finding(finding)
        if name not in self.labels.columns:
            return None
        return self.labels[name].to_numpy(dtype=float)

    def category_values(self, name: str) -> list[str]:
        """The distinct known values of a metadata column (views, sexes, splits)."""
        values = self.metadata[name].dropna().astype(str)
        return sorted(v for v in values.unique() if v.strip())

    def embedding_rows(self, rows) -> np.ndarray:
        """(len(rows), d) embeddings of the given rows."""
        return np.asarray(self.embeddings[np.atleast_1d(np.asarray(rows, dtype=np.int64))])

    def embedding_keys(self):
        """The embeddings as a ``KeyMatrix`` (the one holding them when the service stored them
        so, else a float32 copy made once) for nearest-neighbour scans by cosine."""
        from chexretrieve.search.scoring import KeyMatrix

        keys = self.__dict__.get("_keys")
        if keys is None:
            keys = KeyMatrix.owning(self.embeddings) or KeyMatrix.from_rows(
                self.embeddings, "float32"
            )
            object.__setattr__(self, "_keys", keys)
        return keys


class GalleryColumns:
    """Per-search reads of a gallery's metadata and labels without pandas' per-call overhead
    (``DataFrame.iloc[rows].to_dict("records")`` costs ~5 ms for 10 rows; a 1M-row string
    comparison ~50 ms). Column arrays, factorised codes and parsed values are prepared on first
    use and kept (views of the frame's own arrays where pandas allows; codes are int32); the
    frames must not change afterwards (a gallery is rebuilt, never edited, when the archive
    changes). Safe to share between threads: concurrent first uses may both prepare a column,
    and either result is the same."""

    def __init__(self, metadata: pd.DataFrame, labels: pd.DataFrame):
        self._frames = {"metadata": metadata, "labels": labels}
        self._prepared: dict[tuple, object] = {}

    def _get(self, key: tuple, make):
        value = self._prepared.get(key)
        if value is None:
            value = self._prepared[key] = make()
        return value

    def records(self, frame: str, rows) -> list[dict]:
        """``self.<frame>.iloc[rows].to_dict("records")``, the same keys, values and types."""
        rows = np.asarray(rows, dtype=np.int64)
        df = self._frames[frame]
        readers = self._get((frame, "readers"), lambda: [_reader(df[c]) for c in df.columns])
        columns = [read(rows) for read in readers]
        names = list(df.columns)
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]

    def codes(self, column: str, upper: bool = False) -> tuple[np.ndarray, pd.Index]:
        """(int32 codes per row, -1 for missing; the distinct values) of a metadata column;
        ``upper``: of its text upper-cased with missing as "" (the view filter's spelling)."""

        def make():
            values = self._frames["metadata"][column]
            if upper:
                values = values.fillna("").str.upper()
            codes, uniques = pd.factorize(values, use_na_sentinel=True)
            return codes.astype(np.int32), pd.Index(uniques)

        return self._get(("codes", column, upper), make)

    def not_equal(self, column: str, value) -> np.ndarray:
        """``(metadata[column] != value).to_numpy()`` (missing entries differ from any value)."""
        codes, uniques = self.codes(column)
        position = uniques.get_indexer([value])[0]
        if position < 0:
            return np.ones(len(codes), dtype=bool)
        return codes != position

    def ages(self) -> np.ndarray:
        meta = self._frames["metadata"]
        return self._get(
            ("ages",),
            lambda: pd.to_numeric(meta["patient_age_years"], errors="coerce").to_numpy(float),
        )

    def dates(self) -> pd.Series:
        meta = self._frames["metadata"]
        return self._get(("dates",), lambda: pd.to_datetime(meta["study_date"], errors="coerce"))


def _native(value):
    """What pandas' ``to_dict`` returns for one cell: numpy scalars as Python ones, datetimes as
    Timestamps, pd.NA as None (pandas.core.dtypes.cast.maybe_box_native)."""
    if isinstance(value, np.generic):
        if isinstance(value, np.datetime64):
            return pd.Timestamp(value)
        if isinstance(value, np.timedelta64):
            return pd.Timedelta(value)
        return value.item()
    if value is pd.NA:
        return None
    return value


def _reader(column: pd.Series):
    """rows -> the column's cells at those positions, as ``to_dict("records")`` gives them."""
    values = column.array
    if isinstance(values, pd.arrays.NumpyExtensionArray):
        raw = values.to_numpy()  # a view of the frame's own array
        if raw.dtype.kind in "biufc":
            return lambda rows: raw[rows].tolist()
        return lambda rows: [_native(v) for v in raw[rows]]
    # datetimes, strings, nullable integers, categories: the extension array's own take
    return lambda rows: [_native(v) for v in values.take(rows)]


def find_row(sorted_ids: np.ndarray, order: np.ndarray | None, image_id: object) -> int | None:
    """The row of ``image_id`` by binary search over the sorted ids (``order``: their rows when
    the rows are not in id order; equal ids: the last row), None when absent."""
    try:
        wanted = int(image_id)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return None
    ids = sorted_ids
    if not len(ids) or not ids[0] <= wanted <= ids[-1]:
        return None
    position = int(np.searchsorted(ids, wanted, side="right")) - 1
    if ids[position] != wanted:
        return None
    return position if order is None else int(order[position])


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
    stored.__dict__.pop("_keys", None)  # keys over the other storage
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
    columns: GalleryColumns = gallery.columns  # type: ignore[attr-defined]
    mask = np.ones(len(gallery), dtype=bool)
    if filters.views:
        wanted = {v.upper() for v in filters.views}
        codes, uniques = columns.codes("view_position", upper=True)
        mask &= _isin_codes(codes, uniques, wanted)
    if filters.sex:
        codes, uniques = columns.codes("patient_sex")
        mask &= _isin_codes(codes, uniques, {filters.sex})
    if filters.age_min is not None:
        mask &= columns.ages() >= filters.age_min
    if filters.age_max is not None:
        mask &= columns.ages() <= filters.age_max
    if filters.date_from or filters.date_to:
        dates = columns.dates()
        if filters.date_from:
            mask &= (dates >= pd.Timestamp(filters.date_from)).to_numpy()
        if filters.date_to:
            mask &= (dates <= pd.Timestamp(filters.date_to)).to_numpy()
    if filters.label_known:
        labels = gallery.label_values(finding)
        mask &= np.zeros(len(gallery), dtype=bool) if labels is None else ~np.isnan(labels)
    return mask


@dataclass(frozen=True)
class Exclusions:
    """What a search never returns besides the filtered rows: the query's own study and
    copies (``SearchService._eligible``; applied again in each shard by the Ray backend)."""

    # gallery rows excluded by id (archived copies of an uploaded query, request.exclude_ids)
    rows: tuple[int, ...] = ()
    # the archived query case's row, and its study's code (gallery.study_codes; -1 unknown)
    own_row: int | None = None
    own_study: int | None = None
    # an uploaded query's study UID and pixel hash: rows carrying them are excluded
    study_uid: str | None = None
    pixel_sha256: str | None = None


def eligible_mask(gallery, filters: SearchFilters, finding: str, exclusions: Exclusions,
                  start: int = 0) -> np.ndarray:  # fmt: skip
    """Rows of ``gallery`` that pass the filters and are not excluded. ``gallery`` may hold
    only rows [start, start + len) of the archive (a shard): ``exclusions`` name archive rows."""
    mask = filter_mask(gallery, filters, finding)
    stop = start + len(mask)
    named = (*exclusions.rows, *(() if exclusions.own_row is None else (exclusions.own_row,)))
    local = [int(row) - start for row in named if start <= int(row) < stop]
    if exclusions.own_study is not None and exclusions.own_study >= 0:
        mask &= gallery.study_codes != exclusions.own_study  # type: ignore[attr-defined]
    mask[local] = False
    for column, value in (("study_uid", exclusions.study_uid),
                          ("pixel_sha256", exclusions.pixel_sha256)):  # fmt: skip
        if value and gallery.has_column(column):
            mask &= gallery.columns.not_equal(column, value)  # type: ignore[attr-defined]
    return mask


def _isin_codes(codes: np.ndarray, uniques: pd.Index, wanted: set) -> np.ndarray:
    """Rows whose value is one of ``wanted``, from the column's factorised codes."""
    hit = np.append(np.asarray([u in wanted for u in uniques], dtype=bool), False)
    return hit[codes]  # code -1 (missing) reads the appended False


def empty_labels(n: int) -> pd.DataFrame:
    """A labels frame of n rows, every finding blank."""
    return pd.DataFrame(np.full((n, len(FINDINGS)), np.nan), columns=list(FINDINGS))
