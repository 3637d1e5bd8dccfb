"""Reads of the archive in column chunks, for the archive index (``chexretrieve.index``).

``Store.gallery`` builds one Python object per row and cell and reads every label row: at a
million images that took minutes and several GB. The index reads the archive instead in chunks of
consecutive image ids (``archive_chunk``), each one query for the images, their studies and
embeddings and one grouped query for their labels, returned as columns (numpy arrays and lists);
and after the index was built, only the images the change log names (``changed_images``,
``archive_rows``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from sqlalchemy import Connection, case, func, select

from chexretrieve.findings import FINDINGS
from chexretrieve.store.queries import IMAGE_COLUMNS
from chexretrieve.store.records import bytes_to_matrix
from chexretrieve.store.schema import ArchiveChange, ArchiveRevision, Embedding, Image, Label, Study
from chexretrieve.store.writes import chunks


@dataclass(frozen=True)
class ArchiveChunk:
    """Consecutive archive rows of one encoder as columns, in image-id order."""

    # (n,) int64 image ids, increasing
    image_ids: np.ndarray
    # (n,) int64 id of each image's study (one per StudyInstanceUID)
    study_ids: np.ndarray
    # (n, d) float32 embeddings
    vectors: np.ndarray
    # IMAGE_COLUMNS name -> list of n values (None when unknown; dates as datetime.date)
    columns: dict
    # (n, len(FINDINGS)) float32 labels in FINDINGS order: 1 / 0 / -1, NaN = blank
    labels: np.ndarray
    # (n,) bool: the image has any label row (False: unlabelled)
    labelled: np.ndarray

    def __len__(self) -> int:
        return int(len(self.image_ids))


@dataclass(frozen=True)
class ArchiveChanges:
    """What the change log says happened after one revision."""

    # revision the log was read up to (the store's revision at the read)
    revision: int
    # image ids changed after the asked revision (new, embedded, labels or metadata)
    image_ids: tuple[int, ...]
    # False when a revision in between has no log row (written before the log existed, or by a
    # writer that does not log): the changes are then unknown and the index rereads the archive
    complete: bool


def _select_rows():  # noqa: ANN202
    columns = [Image.id.label("image_id"), Image.study_id.label("study_key")]
    for name in IMAGE_COLUMNS:
        columns.append(Study.study_uid if name == "study_uid" else getattr(Image, name))
    return (
        select(*columns, Embedding.dim, Embedding.vector)
        .join(Study, Study.id == Image.study_id)
        .join(Embedding, Embedding.image_id == Image.id)
    )


def _label_pivot(conn: Connection, condition) -> dict[int, tuple]:  # noqa: ANN001
    """image id -> (value per finding in FINDINGS order, None = blank) for labelled images."""
    pivot = [func.max(case((Label.finding == f, Label.value))) for f in FINDINGS]
    stmt = select(Label.image_id, *pivot).where(condition).group_by(Label.image_id)
    return {int(row[0]): tuple(row[1:]) for row in conn.execute(stmt)}


def _chunk(rows, labels: dict[int, tuple], dim: int) -> ArchiveChunk:
    n = len(rows)
    if any(r.dim != dim or len(r.vector) != 4 * dim for r in rows):
        from chexretrieve.store.engine import StoreError

        bad = [r.image_id for r in rows if r.dim != dim or len(r.vector) != 4 * dim]
        raise StoreError(
            f"embeddings of images {bad[:5]} do not have the encoder's dimension {dim}; the "
            "store is damaged (run integrity_check)"
        )
    ids = np.fromiter((r.image_id for r in rows), dtype=np.int64, count=n)
    studies = np.fromiter((r.study_key for r in rows), dtype=np.int64, count=n)
    vectors = bytes_to_matrix(b"".join(r.vector for r in rows), n, dim)
    transposed = list(zip(*rows, strict=True)) if rows else [()] * (len(IMAGE_COLUMNS) + 4)
    columns = {name: list(transposed[2 + j]) for j, name in enumerate(IMAGE_COLUMNS)}
    values = np.full((n, len(FINDINGS)), np.nan, dtype=np.float32)
    labelled = np.zeros(n, dtype=bool)
    for position, image_id in enumerate(ids.tolist()):
        found = labels.get(image_id)
        if found is not None:
            labelled[position] = True
            values[position] = [np.nan if v is None else v for v in found]
    return ArchiveChunk(ids, studies, vectors, columns, values, labelled)


class ArchiveReads:
    """The Store's column reads for the archive index (a mixin: it uses ``Store._read``)."""

    def archive_chunk(self, encoder_id: str, after_image_id: int = 0, limit: int = 50_000):
        """Up to ``limit`` rows of ``encoder_id``'s archive with image ids above
        ``after_image_id``, in id order (an empty chunk: none left)."""
        dim = self._require_encoder(encoder_id).embed_dim
        stmt = (
            _select_rows()
            .where(Embedding.encoder_id == encoder_id, Image.id > int(after_image_id))
            .order_by(Image.id)
            .limit(int(limit))
        )
        with self._read() as conn:
            rows = conn.execute(stmt).all()
            labels = {}
            if rows:
                low, high = rows[0].image_id, rows[-1].image_id
                labels = _label_pivot(conn, Label.image_id.between(low, high))
        return _chunk(rows, labels, dim)

    def archive_rows(self, encoder_id: str, image_ids: Sequence[int]) -> ArchiveChunk:
        """The rows of those ``image_ids`` that have an embedding of ``encoder_id``, in id
        order (the images the change log names)."""
        dim = self._require_encoder(encoder_id).embed_dim
        wanted = sorted({int(i) for i in image_ids})
        rows, labels = [], {}
        with self._read() as conn:
            for part in chunks(wanted):
                stmt = _select_rows().where(Embedding.encoder_id == encoder_id, Image.id.in_(part))
                rows += conn.execute(stmt.order_by(Image.id)).all()
                labels.update(_label_pivot(conn, Label.image_id.in_(part)))
        return _chunk(rows, labels, dim)

    def archive_changes(self, after_revision: int) -> ArchiveChanges:
        """The images the change log names after ``after_revision``, and whether the log covers
        every revision since (see ``ArchiveChanges.complete``)."""
        with self._read() as conn:
            now = int(conn.execute(select(ArchiveRevision.revision)).scalar() or 0)
            if now <= after_revision:
                return ArchiveChanges(now, (), now == after_revision)
            logged = conn.execute(
                select(func.count(func.distinct(ArchiveChange.revision))).where(
                    ArchiveChange.revision > after_revision, ArchiveChange.revision <= now
                )
            ).scalar_one()
            ids = conn.execute(
                select(ArchiveChange.image_id)
                .distinct()
                .where(
                    ArchiveChange.revision > after_revision,
                    ArchiveChange.revision <= now,
                    ArchiveChange.image_id.is_not(None),
                )
            ).all()
        changed = tuple(sorted(int(r[0]) for r in ids))
        return ArchiveChanges(now, changed, int(logged) == now - after_revision)

    def archive_extent(self, encoder_id: str) -> tuple[int, int]:
        """(embeddings of ``encoder_id``, the largest image id among them; 0 when none)."""
        with self._read() as conn:
            count, top = conn.execute(
                select(func.count(), func.max(Embedding.image_id)).where(
                    Embedding.encoder_id == encoder_id
                )
            ).one()
        return int(count), int(top or 0)
