"""The store: images, labels, per-encoder embeddings, ingest runs, anchor-embedding cache.

``open_store(url)`` opens (and migrates) a database and returns a ``Store``. Every write method is
one transaction (BEGIN IMMEDIATE on SQLite); reads run on WAL snapshots and never wait for a writer.
Embeddings of different encoders are never mixed: a gallery is always one encoder's.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

import numpy as np
import pandas as pd
from sqlalchemy import Connection, and_, func, insert, select, text
from sqlalchemy.exc import DatabaseError, IntegrityError

from chexretrieve.store import cases, writes
from chexretrieve.store.anchor_cache import AnchorEmbeddingCache
from chexretrieve.store.archive_reads import ArchiveReads
from chexretrieve.store.config import StoreConfig
from chexretrieve.store.dataset_records import DatasetRecords
from chexretrieve.store.engine import (
    WRITER_OPTION,
    StoreError,
    create_store_engine,
    database_identity,
    database_label,
    default_db_url,
    run_migrations,
)
from chexretrieve.store.ingest_runs import IngestRuns
from chexretrieve.store.queries import (
    IMAGE_COLUMNS,
    apply_filters,
    find_problems,
    metadata_frame,
    post_filter,
    post_filter_mask,
)
from chexretrieve.store.records import (
    BatchItem,
    CasePage,
    EncoderRecord,
    Gallery,
    ImageFilter,
    ImageRecord,
    Outcome,
    SourceStamp,
    StoredImage,
    Thumbnail,
    bytes_to_matrix,
)
from chexretrieve.store.schema import (
    AnchorEmbedding,
    ArchiveChange,
    ArchiveRevision,
    Embedding,
    EncoderRow,
    Image,
    IngestOutcome,
    IngestRun,
    Label,
    SourceFile,
    Study,
)
from chexretrieve.store.schema import Thumbnail as ThumbnailRow
from chexretrieve.store.schema_version import (
    check_schema,
    is_unknown_revision_error,
    newer_schema_error,
    open_failure,
    refuse_unwritable,
)


def open_store(url: str | None = None, config: StoreConfig | None = None) -> Store:
    """Open the database at ``url``, applying pending migrations.

    Without ``url``: ``config.url`` when a config is given, else ``$CHEXRETRIEVE_DB``, else
    ``sqlite:///chexretrieve.sqlite`` in the current folder.
    """
    config = config or StoreConfig(url=default_db_url())
    if url is not None:
        config = StoreConfig(**{**config.__dict__, "url": url})
    return Store(config)


class Store(DatasetRecords, ArchiveReads, AnchorEmbeddingCache, IngestRuns):
    """All database access of chexretrieve goes through this class (the data-set columns and
    reports: ``dataset_records.DatasetRecords``; the archive index's column reads:
    ``archive_reads.ArchiveReads``; cached anchor embeddings: ``anchor_cache``; ingest runs and
    their outcomes: ``ingest_runs``)."""

    def __init__(self, config: StoreConfig) -> None:
        self.config = config
        self.engine = create_store_engine(config)
        try:
            if not config.read_only:
                refuse_unwritable(config)  # a writer on an immutable file / read-only mount
            if config.read_only:
                check_schema(self.engine, config)  # never migrates: says what to run instead
            elif config.migrate_on_open:
                run_migrations(self.engine, config)
            with self.engine.connect() as conn:
                conn.execute(select(func.count()).select_from(Image)).scalar_one()
        except DatabaseError as exc:
            self.engine.dispose()
            raise StoreError(open_failure(config, exc)) from None
        except StoreError:
            self.engine.dispose()
            raise
        except Exception as exc:
            self.engine.dispose()
            if is_unknown_revision_error(exc):
                raise newer_schema_error(config, exc) from None
            raise

    @property
    def read_only(self) -> bool:
        """Opened for reading only (StoreConfig.read_only): every write raises StoreError."""
        return self.config.read_only

    # ------------------------------------------------------------------ plumbing
    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def label(self) -> str:
        """The URL with any password hidden."""
        return database_label(self.config.url)

    @property
    def identity(self) -> str:
        """Which store this is for the prior's rule (``engine.database_identity``)."""
        return database_identity(self.config.url)

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def _write(self) -> Iterator[Connection]:
        if self.config.read_only:
            raise StoreError(
                f"the store {self.label} is open read-only (search, serve); writing to it needs a "
                "writing command (`chexretrieve ingest`, `chexretrieve anchors embed`)"
            )
        with self.engine.connect() as conn:
            conn = conn.execution_options(**{WRITER_OPTION: True})
            with conn.begin():
                yield conn

    # ------------------------------------------------------------------ encoders
    def register_encoder(
        self, encoder_id: str, embed_dim: int, inv_temperature: float, name: str | None = None
    ) -> EncoderRecord:
        """Add an encoder (idempotent); ValueError if the id is known with another dimension."""
        if not encoder_id or embed_dim <= 0:
            raise ValueError(f"encoder id {encoder_id!r} / dimension {embed_dim} are not valid")
        with self._write() as conn:
            row = conn.execute(select(EncoderRow).where(EncoderRow.id == encoder_id)).first()
            if row is None:
                conn.execute(
                    insert(EncoderRow).values(
                        id=encoder_id,
                        name=name or encoder_id.split(":", 1)[0],
                        embed_dim=int(embed_dim),
                        inv_temperature=float(inv_temperature),
                        registered_at=writes.utc_now(),
                    )
                )
            elif row.embed_dim != embed_dim:
                raise ValueError(
                    f"encoder {encoder_id!r} is stored with dimension {row.embed_dim}, not "
                    f"{embed_dim}; the same encoder id must always mean the same model"
                )
        return self.encoder(encoder_id)  # type: ignore[return-value]

    def encoder(self, encoder_id: str) -> EncoderRecord | None:
        with self._read() as conn:
            row = conn.execute(select(EncoderRow).where(EncoderRow.id == encoder_id)).first()
        if row is None:
            return None
        return EncoderRecord(row.id, row.name, row.embed_dim, row.inv_temperature)

    def encoders(self) -> list[EncoderRecord]:
        with self._read() as conn:
            rows = conn.execute(select(EncoderRow).order_by(EncoderRow.id)).all()
        return [EncoderRecord(r.id, r.name, r.embed_dim, r.inv_temperature) for r in rows]

    def _require_encoder(self, encoder_id: str) -> EncoderRecord:
        record = self.encoder(encoder_id)
        if record is None:
            known = ", ".join(e.encoder_id for e in self.encoders()) or "none"
            raise ValueError(
                f"encoder {encoder_id!r} is not in the store (known: {known}); ingest with it "
                "first or call register_encoder"
            )
        return record

    # ------------------------------------------------------------------ images: writes
    def write_batch(
        self,
        encoder_id: str,
        items: Sequence[BatchItem],
        run_id: int | None = None,
        extra_outcomes: Sequence[Outcome] = (),
        changes: collections.Counter | None = None,
    ) -> list[Outcome]:
        """Store a batch of files in ONE transaction and return one Outcome per item.

        New images get their row, embedding, labels and source stamp together; an image already
        stored with the same pixels is 'already-present' (or 'embedded' when only this encoder's
        embedding was missing); the same SOPInstanceUID with other pixels is a 'conflict' and the
        stored image is kept. With ``run_id`` the outcomes (and ``extra_outcomes``, e.g. rejected
        files) are recorded in the same transaction. ``changes`` counts what the batch changed on
        images already stored (see ``writes.write_items``).
        """
        encoder = self._require_encoder(encoder_id)
        for attempt in range(3):
            try:
                counted: collections.Counter = collections.Counter()
                with self._write() as conn:
                    outcomes = writes.write_items(
                        conn,
                        run_id=run_id,
                        encoder_id=encoder_id,
                        dim=encoder.embed_dim,
                        items=items,
                        changes=counted,
                    )
                    if run_id is not None:
                        writes.record_outcomes(conn, run_id, [*outcomes, *extra_outcomes])
                if changes is not None:
                    changes.update(counted)
                return outcomes
            except IntegrityError:
                # a concurrent writer (PostgreSQL) inserted one of these images first: reclassify
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def add_image_with_embedding(
        self,
        record: ImageRecord,
        embedding: np.ndarray,
        encoder_id: str,
        labels: Mapping[str, float | None] | None = None,
        run_id: int | None = None,
        stamp: SourceStamp | None = None,
    ) -> Outcome:
        """Image row + embedding + labels in one transaction (see ``write_batch``)."""
        item = BatchItem(
            path=record.source_path or record.sop_uid,
            record=record,
            embedding=embedding,
            labels=labels,
            stamp=stamp,
        )
        return self.write_batch(encoder_id, [item], run_id=run_id)[0]

    def set_labels(self, image_id: int, labels: Mapping[str, float | None]) -> bool:
        """Replace this image's labels for the given findings; True when anything changed."""
        with self._write() as conn:
            changed = writes.replace_labels(conn, image_id, labels)
            if changed:
                writes.bump_revision(conn, [image_id])
        return changed

    # ------------------------------------------------------------------ images: reads
    def has_image(self, sop_uid: str) -> bool:
        with self._read() as conn:
            row = conn.execute(select(Image.id).where(Image.sop_uid == sop_uid)).first()
        return row is not None

    def find_images(
        self, sop_uids: Sequence[str], encoder_id: str
    ) -> dict[str, tuple[int, str, bool]]:
        """sop_uid -> (image id, pixel sha256, has an embedding for encoder_id), stored only."""
        with self._read() as conn:
            found = writes.existing_images(conn, sop_uids)
            embedded = writes.images_with_embedding(
                conn, encoder_id, [i for i, _ in found.values()]
            )
        return {sop: (i, sha, i in embedded) for sop, (i, sha) in found.items()}

    def unchanged_sources(self, stamps: Sequence[SourceStamp], encoder_id: str) -> dict[str, int]:
        """path -> image id, for files whose size and mtime match what was stored and whose image
        has an embedding for ``encoder_id``: they need not be decoded again."""
        by_key = {writes.path_key(s.path): s for s in stamps}
        result: dict[str, int] = {}
        with self._read() as conn:
            for part in writes.chunks(sorted(by_key)):
                rows = conn.execute(
                    select(
                        SourceFile.path_key,
                        SourceFile.size_bytes,
                        SourceFile.mtime_ns,
                        SourceFile.image_id,
                    )
                    .join(
                        Embedding,
                        and_(
                            Embedding.image_id == SourceFile.image_id,
                            Embedding.encoder_id == encoder_id,
                        ),
                    )
                    .where(SourceFile.path_key.in_(part))
                )
                for key, size, mtime, image_id in rows:
                    stamp = by_key[key]
                    if stamp.size_bytes == size and stamp.mtime_ns == mtime:
                        result[stamp.path] = image_id
        return result

    def _image_select(self):  # noqa: ANN202
        columns = [Image.id.label("image_id")]
        for name in IMAGE_COLUMNS:
            columns.append(Study.study_uid if name == "study_uid" else getattr(Image, name))
        return select(*columns).join(Study, Study.id == Image.study_id)

    def image_by_id(self, image_id: int) -> StoredImage | None:
        return self._one_image(Image.id == int(image_id))

    def image_by_sop_uid(self, sop_uid: str) -> StoredImage | None:
        return self._one_image(Image.sop_uid == sop_uid)

    def _one_image(self, condition) -> StoredImage | None:  # noqa: ANN001
        stmt = (
            self._image_select()
            .add_columns(Image.accession_number, Image.run_id, Image.ingested_at)
            .where(condition)
        )
        with self._read() as conn:
            row = conn.execute(stmt).first()
        if row is None:
            return None
        return StoredImage(**row._asdict())

    def images_frame(self, filters: ImageFilter | None = None) -> pd.DataFrame:
        """Metadata of every image (matching ``filters``), indexed by image_id."""
        stmt = apply_filters(self._image_select(), filters).order_by(Image.id)
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        frame = metadata_frame([r._asdict() for r in rows])
        return post_filter(frame, filters)

    def gallery(self, encoder_id: str, filters: ImageFilter | None = None) -> Gallery:
        """(image ids, (n, d) float32 embeddings, metadata) of one encoder, ordered by image id."""
        encoder = self._require_encoder(encoder_id)
        stmt = (
            self._image_select()
            .add_columns(Embedding.dim, Embedding.vector)
            .join(Embedding, Embedding.image_id == Image.id)
            .where(Embedding.encoder_id == encoder_id)
        )
        stmt = apply_filters(stmt, filters).order_by(Image.id)
        with self._read() as conn:
            rows = conn.execute(stmt).all()
        dim = encoder.embed_dim
        bad = [r.image_id for r in rows if r.dim != dim or len(r.vector) != 4 * dim]
        if bad:
            raise StoreError(
                f"embeddings of images {bad[:5]} do not have encoder {encoder_id}'s dimension "
                f"{dim}; the store is damaged (run integrity_check)"
            )
        vectors = bytes_to_matrix(b"".join(r.vector for r in rows), len(rows), dim)
        records = [r._asdict() for r in rows]
        for record in records:
            del record["dim"], record["vector"]
        metadata = metadata_frame(records)
        keep = post_filter_mask(metadata, filters)
        metadata = metadata[keep]
        vectors = vectors[keep]
        return Gallery(metadata.index.to_numpy(dtype=np.int64), vectors, metadata)

    def embeddings_for(self, encoder_id: str, image_ids: Sequence[int]) -> np.ndarray:
        """(len(image_ids), d) embeddings in the given order; ValueError if any is missing."""
        encoder = self._require_encoder(encoder_id)
        wanted = [int(i) for i in image_ids]
        found: dict[int, bytes] = {}
        with self._read() as conn:
            for part in writes.chunks(sorted(set(wanted))):
                rows = conn.execute(
                    select(Embedding.image_id, Embedding.vector).where(
                        Embedding.encoder_id == encoder_id, Embedding.image_id.in_(part)
                    )
                )
                found.update({i: v for i, v in rows})
        missing = [i for i in wanted if i not in found]
        if missing:
            raise ValueError(f"images {missing[:10]} have no embedding for encoder {encoder_id}")
        blob = b"".join(found[i] for i in wanted)
        return bytes_to_matrix(blob, len(wanted), encoder.embed_dim)

    def labels_frame(
        self, image_ids: Sequence[int] | None = None, *, metadata: bool = False
    ) -> pd.DataFrame:
        """Labels of labelled images: index image_id, one float column per finding in FINDINGS
        order; 1 / 0 / -1 (uncertain), NaN = blank. Unlabelled images have no row.

        ``metadata=True`` adds, after the findings, the columns of ``DATASET_COLUMNS``
        (``patient_id``, ``study_id``, ``view_group``, ``view_position``, ``sex``, ``age``,
        ``split``, ``dataset_path``; see ``dataset_frame``) for the same rows."""
        table = self._labels_table(image_ids)
        if not metadata:
            return table
        extra = self.dataset_frame(table.index.tolist(), labels=False)
        return table.join(extra, how="left")

    def count_images(self) -> int:
        with self._read() as conn:
            return int(conn.execute(select(func.count()).select_from(Image)).scalar_one())

    def count_embeddings(self, encoder_id: str | None = None) -> int:
        stmt = select(func.count()).select_from(Embedding)
        if encoder_id is not None:
            stmt = stmt.where(Embedding.encoder_id == encoder_id)
        with self._read() as conn:
            return int(conn.execute(stmt).scalar_one())

    def archive_revision(self) -> int:
        """A counter that grows whenever images, embeddings or labels change (cache keys)."""
        with self._read() as conn:
            value = conn.execute(select(ArchiveRevision.revision)).scalar()
        return int(value or 0)

    # ------------------------------------------------------------------ case lookup
    def find_cases(
        self,
        text: str | None = None,
        finding: str | None = None,
        status: str | None = None,
        encoder_id: str | None = None,
        offset: int = 0,
        limit: int = 50,
    ) -> CasePage:
        """The case picker: one page (image-id order) of the cases whose id (digits) or accession
        number (case-insensitive) is exactly ``text``, whose label for ``finding`` has ``status``
        (positive / negative / uncertain / blank / unlabelled, see ``cases.LABEL_STATUSES``) and,
        with ``encoder_id``, that have its embedding; ``CasePage.total`` counts every match.
        Each ``CaseRow`` carries PHI-minimal metadata, the accession number and all labels."""
        with self._read() as conn:
            return cases.find_cases(conn, text, finding, status, encoder_id, offset, limit)

    def read_thumbnails(self, image_ids: Sequence[int]) -> dict[int, bytes]:
        """image id -> thumbnail PNG (8-bit greyscale, ``chexretrieve.dicom.thumbnail_pixels``
        decodes it) for those of ``image_ids`` that have one; one query per 500 ids."""
        with self._read() as conn:
            return cases.read_thumbnails(conn, image_ids)

    def read_thumbnail(self, image_id: int) -> bytes | None:
        """One image's thumbnail PNG, or None when it has none (see ``read_thumbnails``)."""
        return self.read_thumbnails([int(image_id)]).get(int(image_id))

    def put_thumbnails(self, thumbnails: Mapping[int, Thumbnail], replace: bool = False) -> int:
        """Store thumbnails of images that have none (``replace``: overwrite); how many written.
        ValueError when a thumbnail is not PNG bytes; unknown image ids fail (foreign key)."""
        with self._write() as conn:
            return writes.add_thumbnails(conn, thumbnails, replace=replace)

    def images_needing_thumbnail(
        self, max_side: int | None = None, limit: int | None = None
    ) -> list[tuple[int, str | None]]:
        """(image id, source path) of images without a thumbnail (with ``max_side``: or with one
        of another size), for a backfill (``chexretrieve ingest --thumbnails-only``)."""
        with self._read() as conn:
            return cases.images_needing_thumbnail(conn, max_side, limit)

    # ------------------------------------------------------------------ checks
    def table_counts(self) -> dict[str, int]:
        tables = {
            "studies": Study,
            "images": Image,
            "embeddings": Embedding,
            "labels": Label,
            "encoders": EncoderRow,
            "ingest_runs": IngestRun,
            "ingest_outcomes": IngestOutcome,
            "source_files": SourceFile,
            "anchor_embeddings": AnchorEmbedding,
            "thumbnails": ThumbnailRow,
            "archive_changes": ArchiveChange,
        }
        with self._read() as conn:
            return {
                name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
                for name, t in tables.items()
            }

    def integrity_check(self) -> list[str]:
        """Problems found (empty list = healthy): the database's own check, foreign keys,
        images without any embedding, embeddings of the wrong size, duplicate SOP UIDs, unknown
        findings."""
        with self._read() as conn:
            return find_problems(conn)

    def execute_readonly_sql(self, sql: str) -> list[tuple]:
        """Run one read-only SQL statement (tests and diagnostics)."""
        with self._read() as conn:
            return [tuple(r) for r in conn.execute(text(sql)).all()]
