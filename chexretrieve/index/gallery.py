"""The gallery of one index generation, read from its row files by memory map.

:class:`IndexGallery` offers what the search service and the case lookup use of a gallery
(``chexretrieve.search.gallery.Gallery``): ids, embeddings, row lookup, the columns a search
filters on and the metadata and labels of the rows it returns. Nothing is read into Python
objects per archived image: a search touches the feature rows it scans and the few rows it
returns; every block read is first checked against the sealed manifest
(``chexretrieve.index.rowfile.MappedRows``).

``metadata`` and ``labels`` (whole pandas frames, as the in-memory gallery has) are built on first
use for the few callers that still need frames (the curation impact on small archives, tests);
they cost what reading the gallery used to cost.
"""

from __future__ import annotations

import logging
import threading

import numpy as np
import pandas as pd

from chexretrieve.findings import FINDINGS, canonical_finding
from chexretrieve.index.columns import (
    COLUMN_KINDS,
    NO_DATE,
    decode_values,
    label_floats,
    labels_dict,
)
from chexretrieve.index.manifest import Manifest
from chexretrieve.index.rowfile import HEADER_BYTES, IndexDamaged, MappedRows
from chexretrieve.search.gallery import RowLookup, find_row

log = logging.getLogger(__name__)


class IndexGallery(RowLookup):
    """One generation's rows (see the module text); safe to share between threads."""

    #: the rows are memory-mapped (the search service scans them in place)
    mapped = True

    def __init__(self, manifest: Manifest, on_damage=None):
        self.manifest = manifest
        # called with an IndexDamaged before a read that failed its seal raises it
        self.on_damage = on_damage
        self.folder = manifest.folder
        self.encoder_id = manifest.encoder_id
        self.fingerprint = manifest.fingerprint
        self.revision = manifest.revision
        self._lock = threading.Lock()
        self._maps: dict[str, MappedRows] = {}
        self._derived: dict[tuple, object] = {}
        self.image_ids = self._map("image_ids").all()
        self.study_codes = self._map("study_ids").all()
        ids = self.image_ids
        self._order = None
        if not manifest.content.get("ids_sorted", True):
            self._order = np.argsort(ids, kind="stable")
            self._sorted_ids = ids[self._order]
        else:
            self._sorted_ids = ids
        self.columns = IndexColumns(self)
        self._keys = None
        #: a background thread verifies the large files of this generation (ArchiveIndex)
        self.verifying_in_background = False

    # ------------------------------------------------------------------------ plumbing
    def _map(self, name: str) -> MappedRows:
        found = self._maps.get(name)
        if found is None:
            try:
                found = MappedRows(self.folder, self.manifest.file(name), self.on_damage)
            except IndexDamaged as exc:
                if self.on_damage is not None:
                    self.on_damage(exc)
                raise
            with self._lock:
                found = self._maps.setdefault(name, found)
        return found

    def _derive(self, key: tuple, make):
        value = self._derived.get(key)
        if value is None:
            value = make()
            with self._lock:
                value = self._derived.setdefault(key, value)
        return value

    def __len__(self) -> int:
        return self.manifest.rows

    def verify_small(self, limit: int = 64 << 20) -> None:
        """Every block of the row files under ``limit`` bytes (ids, studies, labels, codes and
        numbers: what filters read), at open; the larger ones are checked as they are read."""
        for name in self.manifest.content["files"]:
            record = self.manifest.file(name)
            if record.rows * record.row_bytes <= limit:
                self._map(name).verify()

    @property
    def dim(self) -> int:
        return int(self.manifest.file("embeddings").width)

    # ------------------------------------------------------------------------- ids, rows
    def _find(self, image_id: object) -> int | None:
        return find_row(self._sorted_ids, self._order, image_id)

    def id_order(self) -> np.ndarray:
        """Row numbers in image-id order (the case picker lists cases so)."""
        if self._order is None:
            return self._derive(("rows",), lambda: np.arange(len(self), dtype=np.int64))
        return self._order

    # ----------------------------------------------------------------------- embeddings
    @property
    def embeddings(self) -> np.ndarray:
        """Every embedding row (float32, mapped), all blocks verified first (once)."""
        return self._map("embeddings").all()

    def embedding_rows(self, rows) -> np.ndarray:
        """(len(rows), d) float32 embeddings of the given rows, their blocks verified."""
        return self._map("embeddings").rows(np.atleast_1d(np.asarray(rows, dtype=np.int64)))

    def embeddings_ready(self) -> bool:
        """False while a background thread (`serve`) is still verifying the embeddings: a full
        scan of them now would wait for it. True otherwise (a scan verifies what it reads)."""
        return not self.verifying_in_background or self._map("embeddings").complete()

    def embedding_keys(self):
        """The embeddings as a ``KeyMatrix`` scanned in place (cosine, nearest neighbours)."""
        if self._keys is None:
            from chexretrieve.search.scoring import KeyMatrix

            mapped = self._map("embeddings")
            mapped.verify()
            record = mapped.record
            keys = KeyMatrix.mapped(mapped.path, HEADER_BYTES, record.rows, record.width,
                                    record.width, "float32")  # fmt: skip
            with self._lock:
                self._keys = self._keys or keys
        return self._keys

    # ----------------------------------------------------------------- metadata, labels
    def has_column(self, name: str) -> bool:
        return f"meta/{name}" in self.manifest.content["files"]

    def _column_rows(self, name: str, rows) -> list:
        mapped = self._map(f"meta/{name}")
        raw = mapped.rows(rows)
        return decode_values(name, raw, self.manifest.content["categories"].get(name, []))

    def value(self, name: str, row: int):
        """One metadata value of one row (None when unknown)."""
        return self._column_rows(name, [int(row)])[0]

    def metadata_records(self, rows) -> list[dict]:
        """The metadata of the given rows as dicts (IMAGE_COLUMNS keys; None when unknown)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        names = [n for n in COLUMN_KINDS if f"meta/{n}" in self.manifest.content["files"]]
        columns = [self._column_rows(name, rows) for name in names]
        return [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]

    def label_records(self, rows) -> list[dict]:
        codes = self._map("labels").rows(np.asarray(rows, dtype=np.int64).reshape(-1))
        return [labels_dict(row) for row in codes]

    def metadata_of(self, image_id: int) -> dict:
        return self.metadata_records([self.row_of(image_id)])[0]

    def labels_of(self, image_id: int) -> dict:
        return self.label_records([self.row_of(image_id)])[0]

    def label_codes(self) -> np.ndarray:
        """(n, findings) int8 label codes (chexretrieve.index.columns), verified."""
        return self._map("labels").all()

    def label_values(self, finding: str) -> np.ndarray:
        """One finding's labels over every row: 1 / 0 / -1, NaN blank or unlabelled."""
        j = FINDINGS.index(canonical_finding(finding))
        return self._derive(("labels", j), lambda: label_floats(self.label_codes()[:, j]))

    def category_values(self, name: str) -> list[str]:
        """The distinct known values of a category column (views, sexes, splits)."""
        codes, uniques = self.columns.codes(name)
        present = np.unique(codes[codes >= 0])
        return [str(uniques[c]) for c in present.tolist()]

    # ------------------------------------------------------------------ pandas frames
    @property
    def metadata(self) -> pd.DataFrame:
        """Every row's metadata as a frame indexed by image id (slow for a large archive)."""

        def make() -> pd.DataFrame:
            if len(self) > 100_000:
                log.warning("reading the metadata of %s rows into a frame", f"{len(self):,}")
            frame = pd.DataFrame(self.metadata_records(np.arange(len(self))))
            frame.index = pd.Index(self.image_ids, name="image_id")
            return frame

        return self._derive(("metadata-frame",), make)

    @property
    def labels(self) -> pd.DataFrame:
        """Every row's labels as a frame indexed by image id (FINDINGS columns, NaN blank)."""
        return self._derive(
            ("labels-frame",),
            lambda: pd.DataFrame(
                label_floats(self.label_codes()), columns=list(FINDINGS),
                index=pd.Index(self.image_ids, name="image_id"),
            ),
        )  # fmt: skip


class IndexColumns:
    """The per-search column reads of ``chexretrieve.search.gallery.GalleryColumns`` over an
    index generation: codes and parsed values are prepared on first use and kept."""

    def __init__(self, gallery: IndexGallery):
        self._gallery = gallery

    def records(self, frame: str, rows) -> list[dict]:
        if frame == "labels":
            return self._gallery.label_records(rows)
        return self._gallery.metadata_records(rows)

    def codes(self, column: str, upper: bool = False) -> tuple[np.ndarray, pd.Index]:
        gallery = self._gallery

        def make():
            categories = gallery.manifest.content["categories"].get(column, [])
            codes = gallery._map(f"meta/{column}").all()
            if not upper:
                return np.asarray(codes), pd.Index(categories, dtype=object)
            spelled = [str(c).upper() for c in categories]
            uniques = list(dict.fromkeys(v for v in spelled if v))
            mapping = np.array([uniques.index(v) if v else -1 for v in spelled] + [-1], np.int32)
            return mapping[codes], pd.Index(uniques, dtype=object)

        return gallery._derive(("codes", column, upper), make)

    def not_equal(self, column: str, value) -> np.ndarray:
        """Rows whose ``column`` differs from ``value`` (unknown values differ from any)."""
        if COLUMN_KINDS.get(column) == "category":
            codes, uniques = self.codes(column)
            position = uniques.get_indexer([value])[0]
            return np.ones(len(codes), dtype=bool) if position < 0 else codes != position
        stored = self._gallery._map(f"meta/{column}").all()
        return stored != str(value).encode("utf-8")

    def ages(self) -> np.ndarray:
        gallery = self._gallery
        return gallery._derive(
            ("ages",), lambda: np.asarray(gallery._map("meta/patient_age_years").all(), float)
        )

    def dates(self) -> pd.Series:
        gallery = self._gallery

        def make() -> pd.Series:
            days = np.asarray(gallery._map("meta/study_date").all(), dtype=np.int64)
            stamps = (days * 86400).astype("datetime64[s]")
            stamps[days == NO_DATE] = np.datetime64("NaT")
            return pd.Series(stamps)

        return gallery._derive(("dates",), make)
