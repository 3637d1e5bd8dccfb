"""The store's tables as SQLAlchemy 2 ORM classes; the Alembic migrations in ``db/`` build the same.

Portable across SQLite and PostgreSQL: plain types only, named constraints (one naming
convention), embeddings as little-endian float32 bytes. ``tests/store`` checks that the migrated
schema equals this metadata, so a change here needs a new migration in ``db/versions/``.

Label values: 1 = positive, 0 = negative, -1 = uncertain, NULL = blank (the finding was not
mentioned). An image with no label rows at all is unlabelled. Evaluation decides how to use -1 and
blank; the store keeps exactly what the labels file said.
"""

from __future__ import annotations

import datetime as dt

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: outcomes an ingest records per file
OUTCOMES = ("ingested", "embedded", "already-present", "rejected", "conflict")
RUN_STATUSES = ("running", "completed", "failed", "interrupted")

UID = String(64)  # DICOM UIDs are at most 64 characters


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class Study(Base):
    __tablename__ = "studies"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    study_uid: Mapped[str] = mapped_column(UID, unique=True)
    patient_id: Mapped[str | None] = mapped_column(String(64))
    study_date: Mapped[dt.date | None] = mapped_column(Date)


class IngestRun(Base):
    __tablename__ = "ingest_runs"
    __table_args__ = (
        CheckConstraint(
            "status IN ('running', 'completed', 'failed', 'interrupted')", name="status"
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16))
    host: Mapped[str | None] = mapped_column(String(255))
    pid: Mapped[int | None] = mapped_column(Integer)
    encoder_id: Mapped[str | None] = mapped_column(String(200))
    settings_json: Mapped[str | None] = mapped_column(Text)
    counts_json: Mapped[str | None] = mapped_column(Text)


class Image(Base):
    __tablename__ = "images"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sop_uid: Mapped[str] = mapped_column(UID, unique=True)
    study_id: Mapped[int] = mapped_column(ForeignKey("studies.id"), index=True)
    series_uid: Mapped[str | None] = mapped_column(UID)
    patient_id: Mapped[str | None] = mapped_column(String(64), index=True)
    patient_sex: Mapped[str | None] = mapped_column(String(16))
    patient_age_years: Mapped[float | None] = mapped_column(Float)
    study_date: Mapped[dt.date | None] = mapped_column(Date)
    view_position: Mapped[str | None] = mapped_column(String(16))
    manufacturer: Mapped[str | None] = mapped_column(String(128))
    body_part: Mapped[str | None] = mapped_column(String(64))
    photometric: Mapped[str | None] = mapped_column(String(16))
    modality: Mapped[str | None] = mapped_column(String(16))
    pixel_rows: Mapped[int | None] = mapped_column(Integer)
    pixel_columns: Mapped[int | None] = mapped_column(Integer)
    pixel_spacing_row_mm: Mapped[float | None] = mapped_column(Float)
    pixel_spacing_col_mm: Mapped[float | None] = mapped_column(Float)
    transfer_syntax: Mapped[str | None] = mapped_column(UID)
    source_format: Mapped[str | None] = mapped_column(String(16))
    pixel_sha256: Mapped[str] = mapped_column(String(64))
    source_path: Mapped[str | None] = mapped_column(Text)
    split: Mapped[str | None] = mapped_column(String(16), index=True)
    # AccessionNumber: searchable by prefix (the case picker), never part of a gallery's metadata
    accession_number: Mapped[str | None] = mapped_column(String(64), index=True)
    # first Window Center / Width of the file in modality output units (the viewer's default)
    window_center: Mapped[float | None] = mapped_column(Float)
    window_width: Mapped[float | None] = mapped_column(Float)
    # 'frontal' / 'lateral' (from the data set's files, else from ViewPosition); NULL = unknown
    view_group: Mapped[str | None] = mapped_column(String(16), index=True)
    # the image's name in its public data set: the path relative to the data-set root
    dataset_path: Mapped[str | None] = mapped_column(Text)
    # the data set's own study id (MIMIC study_id, CheXpert patient/study); NULL for plain files
    dataset_study_id: Mapped[str | None] = mapped_column(String(64), index=True)
    run_id: Mapped[int | None] = mapped_column(ForeignKey("ingest_runs.id"))
    ingested_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class Report(Base):
    """The radiology report of one study, keyed by the data-set study id (else the study UID)."""

    __tablename__ = "reports"

    study_key: Mapped[str] = mapped_column(String(64), primary_key=True)
    text: Mapped[str] = mapped_column(Text)
    source: Mapped[str | None] = mapped_column(Text)  # file (and line) it was read from
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class Thumbnail(Base):
    """A small 8-bit greyscale PNG of one image's default display, written at ingest."""

    __tablename__ = "thumbnails"

    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    max_side: Mapped[int] = mapped_column(Integer)  # the size asked for (longest side at most)
    pixel_rows: Mapped[int] = mapped_column(Integer)  # of the PNG
    pixel_columns: Mapped[int] = mapped_column(Integer)
    png: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class EncoderRow(Base):
    __tablename__ = "encoders"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    name: Mapped[str] = mapped_column(String(100))
    embed_dim: Mapped[int] = mapped_column(Integer)
    inv_temperature: Mapped[float] = mapped_column(Float)
    registered_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class Embedding(Base):
    __tablename__ = "embeddings"
    __table_args__ = (Index("ix_embeddings_image_id", "image_id"),)

    # (encoder, image) order so one encoder's gallery is a primary-key range scan
    encoder_id: Mapped[str] = mapped_column(ForeignKey("encoders.id"), primary_key=True)
    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    dim: Mapped[int] = mapped_column(Integer)
    vector: Mapped[bytes] = mapped_column(LargeBinary)  # dim little-endian float32 values


class Label(Base):
    __tablename__ = "labels"
    __table_args__ = (CheckConstraint("value IS NULL OR value IN (-1.0, 0.0, 1.0)", name="value"),)

    image_id: Mapped[int] = mapped_column(
        ForeignKey("images.id", ondelete="CASCADE"), primary_key=True
    )
    finding: Mapped[str] = mapped_column(String(64), primary_key=True)
    value: Mapped[float | None] = mapped_column(Float)  # 1, 0, -1 (uncertain), NULL (blank)


class IngestOutcome(Base):
    __tablename__ = "ingest_outcomes"
    __table_args__ = (
        CheckConstraint(
            "outcome IN ('ingested', 'embedded', 'already-present', 'rejected', 'conflict')",
            name="outcome",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("ingest_runs.id"), index=True)
    path: Mapped[str] = mapped_column(Text)
    outcome: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[str | None] = mapped_column(Text)
    sop_uid: Mapped[str | None] = mapped_column(UID)
    image_id: Mapped[int | None] = mapped_column(ForeignKey("images.id", ondelete="SET NULL"))
    recorded_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class SourceFile(Base):
    """A file already stored, with its size and mtime, so an unchanged file is not decoded again."""

    __tablename__ = "source_files"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path_key: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the path
    path: Mapped[str] = mapped_column(Text)
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    mtime_ns: Mapped[int] = mapped_column(BigInteger)
    image_id: Mapped[int] = mapped_column(ForeignKey("images.id", ondelete="CASCADE"), index=True)
    seen_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class AnchorEmbedding(Base):
    """Cached text embeddings of one anchor-set version under one encoder (N sentences x d)."""

    __tablename__ = "anchor_embeddings"
    __table_args__ = (
        UniqueConstraint(
            "anchor_set_id",
            "version",
            "encoder_id",
            "content_hash",
            name="uq_anchor_embeddings_key",
        ),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    anchor_set_id: Mapped[str] = mapped_column(String(200))
    version: Mapped[str] = mapped_column(String(64))
    content_hash: Mapped[str] = mapped_column(String(128))
    encoder_id: Mapped[str] = mapped_column(ForeignKey("encoders.id"))
    n_sentences: Mapped[int] = mapped_column(Integer)
    dim: Mapped[int] = mapped_column(Integer)
    matrix: Mapped[bytes] = mapped_column(LargeBinary)  # n_sentences x dim little-endian float32
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class ArchiveRevision(Base):
    """One row whose counter grows with every write that changes images, embeddings or labels."""

    __tablename__ = "archive_revision"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)  # always 1
    revision: Mapped[int] = mapped_column(BigInteger)
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class ArchiveChange(Base):
    """The images one write changed, with the archive revision that write made: a new image, a
    new embedding of a stored one, changed labels or metadata (``image_id``), or a change of no
    image, such as a report (``image_id`` NULL). The archive index (``chexretrieve.index``)
    reads only the images changed since the revision it was built at, instead of the archive."""

    __tablename__ = "archive_changes"
    __table_args__ = (Index("ix_archive_changes_revision", "revision"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    revision: Mapped[int] = mapped_column(BigInteger)
    image_id: Mapped[int | None] = mapped_column(Integer)


#: what a DICOMweb ingest knows about a study / an instance of one PACS (chexretrieve.pacs)
PACS_STUDY_STATUSES = ("partial", "complete")
PACS_INSTANCE_STATUSES = ("stored", "rejected", "conflict", "transfer-failed")


class PacsStudy(Base):
    """A study seen on a PACS; 'complete' only once every listed instance arrived and settled."""

    __tablename__ = "pacs_studies"
    __table_args__ = (
        UniqueConstraint("source", "study_uid"),
        CheckConstraint("status IN ('partial', 'complete')", name="status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(255))  # DICOMweb root URL, never credentials
    study_uid: Mapped[str] = mapped_column(UID)
    status: Mapped[str] = mapped_column(String(16))
    expected_instances: Mapped[int] = mapped_column(Integer)  # listed by QIDO (admitted series)
    stored_instances: Mapped[int] = mapped_column(Integer)
    rejected_instances: Mapped[int] = mapped_column(Integer)  # rejected or in conflict
    run_id: Mapped[int | None] = mapped_column(ForeignKey("ingest_runs.id"))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[dt.datetime | None] = mapped_column(DateTime(timezone=True))


class PacsInstance(Base):
    """The latest outcome of one instance of a PACS: stored, rejected, conflict, transfer-failed."""

    __tablename__ = "pacs_instances"
    __table_args__ = (
        UniqueConstraint("source", "sop_uid"),
        CheckConstraint(
            "status IN ('stored', 'rejected', 'conflict', 'transfer-failed')", name="status"
        ),
        Index("ix_pacs_instances_source_study_uid", "source", "study_uid"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    source: Mapped[str] = mapped_column(String(255))
    study_uid: Mapped[str] = mapped_column(UID)
    series_uid: Mapped[str] = mapped_column(UID)
    sop_uid: Mapped[str] = mapped_column(UID)
    status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[str | None] = mapped_column(Text)
    attempts: Mapped[int] = mapped_column(Integer)  # transfers tried over all runs
    image_id: Mapped[int | None] = mapped_column(ForeignKey("images.id", ondelete="SET NULL"))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


#: roles of a user account, least to most privileged (chexretrieve.accounts.roles says what each
#: may do)
ROLES = ("radiologist", "curator", "admin")


class UserAccount(Base):
    """A person who may sign in to `chexretrieve serve` (see chexretrieve.accounts)."""

    __tablename__ = "users"
    __table_args__ = (CheckConstraint("role IN ('radiologist', 'curator', 'admin')", name="role"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)  # the login name, as typed
    role: Mapped[str] = mapped_column(String(16))
    # argon2id hash in the PHC string format ($argon2id$v=19$m=...,t=...,p=...$salt$hash); NULL
    # for an account that signs in only through the trusted-header (SSO) mode
    password_hash: Mapped[str | None] = mapped_column(String(255))
    disabled: Mapped[int] = mapped_column(Integer, default=0)  # 1 = may no longer sign in
    created_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class AuditAnchor(Base):
    """What the store saw of an audit trail (issue 36): its length and last line at the last
    record written by a process using this store, so a trail emptied, cut or deleted together
    with its head record is still found out (chexretrieve.audit.anchor). One row per trail."""

    __tablename__ = "audit_anchors"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # SHA-256 of the trail's first line: which trail (a new file at the same path is another)
    trail: Mapped[str] = mapped_column(String(64), unique=True)
    # absolute path of the audit file when the row was last written
    path: Mapped[str] = mapped_column(Text)
    # the last record's seq, the number of lines and bytes up to it, and that line's SHA-256
    seq: Mapped[int] = mapped_column(BigInteger)
    lines: Mapped[int] = mapped_column(BigInteger)
    size: Mapped[int] = mapped_column(BigInteger)
    last: Mapped[str] = mapped_column(String(64))
    # set by `chexretrieve audit retire`: who retired the trail, when and why (a trail knowingly
    # archived or lost is no longer reported as missing); NULL for a live trail
    retired: Mapped[str | None] = mapped_column(Text)
    # HMAC-SHA256 under the audit key of the fields above (an edited row is found out)
    mac: Mapped[str] = mapped_column(String(64))
    first_seen: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[dt.datetime] = mapped_column(DateTime(timezone=True))


class WebSession(Base):
    """A signed-in session of `chexretrieve serve` (issue 33): kept here, not in one server's
    memory, so every server process on this store knows it and an administrator can end it."""

    __tablename__ = "web_sessions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    # SHA-256 (hex) of the session token; the token itself is only in the browser's cookie
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_name: Mapped[str] = mapped_column(String(64), index=True)
    client: Mapped[str | None] = mapped_column(String(64))  # address it signed in from
    # times as UTC seconds since the epoch (compared across processes and machines)
    created_at: Mapped[float] = mapped_column(Float)
    last_seen_at: Mapped[float] = mapped_column(Float)  # refreshed at most once a minute
    expires_at: Mapped[float] = mapped_column(Float, index=True)  # created_at + the longest age


class SignInCount(Base):
    """Sign-in attempts of one user name or one client address (``key``: ``user:NAME`` or
    ``client:ADDRESS``), counted before the password is checked (chexretrieve.accounts.throttle)."""

    __tablename__ = "sign_in_counts"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    failures: Mapped[int] = mapped_column(Integer)  # attempts since the last success
    locked_until: Mapped[float] = mapped_column(Float)  # no attempt is checked before (UTC s)
    updated_at: Mapped[float] = mapped_column(Float, index=True)


class ViewerGrant(Base):
    """A search's grant to open studies in the OHIF viewer, or a viewer session opened from one
    (``kind``), with its user and studies (chexretrieve.viewer_web.access)."""

    __tablename__ = "viewer_grants"
    __table_args__ = (CheckConstraint("kind IN ('grant', 'session')", name="kind"),)

    # SHA-256 (hex) of the token in the link or the viewer cookie
    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    kind: Mapped[str] = mapped_column(String(8))
    user_name: Mapped[str] = mapped_column(String(255))
    studies: Mapped[str] = mapped_column(Text)  # JSON list of study UIDs
    created_at: Mapped[float] = mapped_column(Float, index=True)


metadata = Base.metadata
