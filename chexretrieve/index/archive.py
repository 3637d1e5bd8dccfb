"""The archive part of an index: ids, embeddings, study ids, labels and metadata columns.

``ArchiveRows`` brings the row files of a working copy of the manifest up to the store:

* a first build reads the archive in chunks of consecutive image ids (``Store.archive_chunk``)
  and appends each to every row file, checkpointing after each chunk (a killed build resumes
  after its last checkpoint: ``resume_after``);
* an update reads only the images the store's change log names since the indexed revision
  (``Store.archive_changes``): images not in the index are appended; images in it whose labels
  or metadata changed get those columns rewritten into new files (embeddings never change);
* a change log with a gap (a store written before the log existed) makes it reread everything.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from chexretrieve.findings import FINDINGS
from chexretrieve.index.columns import (
    COLUMN_KINDS,
    column_dtype,
    encode_column,
    encode_labels,
    text_width,
)
from chexretrieve.index.rowfile import (
    MappedRows,
    RowAppender,
    RowFileRecord,
    new_record,
)

#: rows copied at a time when a column file is rewritten
COPY_ROWS = 1 << 16


def row_file_name(logical: str, serial: int) -> str:
    return f"rows/{logical}.{serial:04d}.npy"


def archive_layout(dim: int) -> dict[str, tuple[str, int]]:
    """Logical row file -> (dtype, width) of the archive part (text widths fixed on first use)."""
    layout = {
        "image_ids": ("int64", 0),
        "embeddings": ("float32", int(dim)),
        "study_ids": ("int64", 0),
        "labels": ("int8", len(FINDINGS)),
    }
    for name in COLUMN_KINDS:
        layout[f"meta/{name}"] = (column_dtype(name, 8), 0)
    return layout


class ArchiveRows:
    """Appends to and rewrites the archive's row files of ``content`` (a manifest's content,
    changed in place); ``checkpoint()`` makes what was written durable and returns it."""

    def __init__(self, folder, content: dict, dim: int):
        self.folder = folder
        self.content = content
        self.dim = int(dim)
        self._appenders: dict[str, RowAppender] = {}
        layout = archive_layout(dim)
        for logical, (dtype, width) in layout.items():
            if logical not in content["files"]:
                record = new_record(row_file_name(logical, self._serial()), dtype, width)
                content["files"][logical] = record.as_dict()

    def _serial(self) -> int:
        self.content["serial"] = int(self.content.get("serial", 0)) + 1
        return self.content["serial"]

    def _appender(self, logical: str) -> RowAppender:
        found = self._appenders.get(logical)
        if found is None:
            record = RowFileRecord.from_dict(self.content["files"][logical])
            found = self._appenders[logical] = RowAppender(self.folder, record)
        return found

    def close(self) -> None:
        for appender in self._appenders.values():
            appender.close()
        self._appenders.clear()

    def checkpoint(self) -> None:
        for logical, appender in self._appenders.items():
            self.content["files"][logical] = appender.checkpoint().as_dict()

    # ------------------------------------------------------------------------ encoding
    def _encoded(self, chunk) -> dict[str, np.ndarray]:
        """The chunk's arrays per logical file (text columns widened first when needed)."""
        categories = self.content["categories"]
        arrays = {
            "image_ids": chunk.image_ids.astype(np.int64),
            "embeddings": np.ascontiguousarray(chunk.vectors, dtype=np.float32),
            "study_ids": chunk.study_ids.astype(np.int64),
            "labels": encode_labels(chunk.labels, chunk.labelled),
        }
        for name, kind in COLUMN_KINDS.items():
            logical = f"meta/{name}"
            values = chunk.columns[name]
            width = 0
            if kind == "text":
                width = int(np.dtype(self.content["files"][logical]["dtype"]).itemsize)
                needed = text_width(values)
                if needed > width:
                    self._widen(logical, needed)
                    width = needed
            arrays[logical] = encode_column(name, values, categories.setdefault(name, []), width)
        return arrays

    def _widen(self, logical: str, width: int) -> None:
        """Rewrite a text column at a larger width (a value longer than any before)."""
        self.checkpoint()
        old = RowFileRecord.from_dict(self.content["files"][logical])
        appender = self._appenders.pop(logical, None)
        if appender is not None:
            appender.close()
        self._rewrite(logical, old, f"|S{width}", {})

    def _rewrite(self, logical: str, old: RowFileRecord, dtype: str, replace: dict) -> None:
        """Copy ``old`` into a new file of ``dtype``, rows in ``replace`` (row -> value) changed."""
        record = new_record(row_file_name(logical, self._serial()), dtype, old.width)
        source = MappedRows(self.folder, old) if old.rows else None
        rows = np.fromiter(replace, dtype=np.int64, count=len(replace))
        values = list(replace.values())
        with RowAppender(self.folder, record) as appender:
            for start in range(0, old.rows, COPY_ROWS):
                stop = min(old.rows, start + COPY_ROWS)
                source.verify(start, stop)
                block = np.array(source.array[start:stop], dtype=dtype)
                inside = (rows >= start) & (rows < stop)
                for row, value in zip(
                    rows[inside], (v for v, i in zip(values, inside, strict=True) if i), strict=True
                ):  # noqa: E501
                    block[row - start] = value
                appender.append(block)
            self.content["files"][logical] = appender.checkpoint().as_dict()

    # ------------------------------------------------------------------------- writing
    def append(self, chunk) -> None:
        """Append a chunk of new archive rows to every row file."""
        if not len(chunk):
            return
        arrays = self._encoded(chunk)
        ids = arrays["image_ids"]
        last = self._last_id()
        if last is not None and ids[0] <= last:
            self.content["ids_sorted"] = False
        if len(ids) > 1 and not np.all(ids[1:] > ids[:-1]):
            self.content["ids_sorted"] = False
        for logical, array in arrays.items():
            self._appender(logical).append(array)
        self.content["rows"] = int(self._appender("image_ids").rows)
        self.content["last_image_id"] = int(max(int(ids.max()), last or 0))

    def _last_id(self) -> int | None:
        return self.content.get("last_image_id") if self.content.get("rows") else None

    def replace(self, rows: np.ndarray, chunk) -> list[str]:
        """Rows already in the index whose labels or metadata changed (``chunk`` holds their new
        values, ``rows`` their row numbers): each column that differs is rewritten. The names of
        the rewritten columns."""
        self.checkpoint()
        self.close()
        arrays = self._encoded(chunk)
        rewritten = []
        for logical, array in arrays.items():
            if logical in ("image_ids", "embeddings"):
                continue  # an image's id and embedding never change
            old = RowFileRecord.from_dict(self.content["files"][logical])
            stored = MappedRows(self.folder, old).rows(rows)
            if stored.dtype.kind == "S" and array.dtype != stored.dtype:
                array = array.astype(stored.dtype)
            if np.array_equal(stored, array, equal_nan=stored.dtype.kind == "f"):
                continue
            self._rewrite(logical, old, old.dtype, dict(zip(rows.tolist(), array, strict=True)))
            rewritten.append(logical)
        return rewritten


def append_archive(
    writer: ArchiveRows,
    store,
    encoder_id: str,
    after_image_id: int,
    chunk_rows: int,
    on_chunk: Callable[[int], None],
    total: int,
) -> None:
    """Append every archived row of ``encoder_id`` with an id above ``after_image_id``, one
    chunk at a time; ``on_chunk(last image id)`` after each chunk's checkpoint."""
    while True:
        chunk = store.archive_chunk(encoder_id, after_image_id, chunk_rows)
        if not len(chunk):
            return
        writer.append(chunk)
        writer.checkpoint()
        after_image_id = int(chunk.image_ids[-1])
        on_chunk(after_image_id)
