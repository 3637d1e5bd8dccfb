"""The store (SQLAlchemy 2; the only package that imports SQLAlchemy): images, labels, embeddings.

``open_store(url)`` opens a SQLite file or any SQLAlchemy URL, applies the Alembic migrations in the
top-level ``db/`` folder, and returns a ``Store``. See ``chexretrieve.store.store`` for the API and
``chexretrieve.store.schema`` for the tables and the label policy.

For the case lookup UI (issue 15):
- ``Store.read_thumbnails(ids) -> {id: png}`` / ``read_thumbnail(id)``: thumbnails written at
  ingest (8-bit greyscale PNG, longest side ``IngestConfig.thumbnail_px``; decode with
  ``chexretrieve.dicom.thumbnail_pixels``); ``put_thumbnails`` caches one made later (e.g. lazily
  for an image of an older store; ``chexretrieve ingest --thumbnails-only`` backfills them all).
- ``Store.find_cases(text, finding, status, encoder_id, offset, limit) -> CasePage``: the case
  picker (exact case id or accession number, label status, paging with the total, labels per case).
- ``Store.image_by_id(id)``: ``source_path`` (the original file, for full-size pixels) and
  ``window_center`` / ``window_width`` (the file's first DICOM window, modality units).
"""

from chexretrieve.store.config import DEFAULT_DB_URL, StoreConfig
from chexretrieve.store.engine import (
    StoreError,
    database_identity,
    database_label,
    default_db_url,
    sqlite_file,
)
from chexretrieve.store.records import (
    BatchItem,
    CasePage,
    CaseRow,
    EncoderRecord,
    Gallery,
    ImageFilter,
    ImageRecord,
    Outcome,
    SourceStamp,
    StoredImage,
    Thumbnail,
)
from chexretrieve.store.schema import OUTCOMES
from chexretrieve.store.schema_version import schema_versions, upgrade_store
from chexretrieve.store.store import IMAGE_COLUMNS, Store, open_store

__all__ = [
    "DEFAULT_DB_URL",
    "IMAGE_COLUMNS",
    "OUTCOMES",
    "BatchItem",
    "CasePage",
    "CaseRow",
    "EncoderRecord",
    "Gallery",
    "ImageFilter",
    "ImageRecord",
    "Outcome",
    "SourceStamp",
    "Store",
    "StoreConfig",
    "StoreError",
    "StoredImage",
    "Thumbnail",
    "database_identity",
    "database_label",
    "default_db_url",
    "open_store",
    "schema_versions",
    "sqlite_file",
    "upgrade_store",
]
