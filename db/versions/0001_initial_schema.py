"""Initial schema: studies, images, encoders, embeddings, labels, ingest runs and outcomes,
source-file stamps, anchor-embedding cache, archive revision counter.

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "encoders",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("embed_dim", sa.Integer(), nullable=False),
        sa.Column("inv_temperature", sa.Float(), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_encoders")),
    )
    op.create_table(
        "ingest_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=True),
        sa.Column("pid", sa.Integer(), nullable=True),
        sa.Column("encoder_id", sa.String(length=200), nullable=True),
        sa.Column("settings_json", sa.Text(), nullable=True),
        sa.Column("counts_json", sa.Text(), nullable=True),
        sa.CheckConstraint(
            "status IN ('running', 'completed', 'failed', 'interrupted')",
            name=op.f("ck_ingest_runs_status"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_runs")),
    )
    op.create_table(
        "studies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("study_uid", sa.String(length=64), nullable=False),
        sa.Column("patient_id", sa.String(length=64), nullable=True),
        sa.Column("study_date", sa.Date(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_studies")),
        sa.UniqueConstraint("study_uid", name=op.f("uq_studies_study_uid")),
    )
    op.create_table(
        "anchor_embeddings",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("anchor_set_id", sa.String(length=200), nullable=False),
        sa.Column("version", sa.String(length=64), nullable=False),
        sa.Column("content_hash", sa.String(length=128), nullable=False),
        sa.Column("encoder_id", sa.String(length=200), nullable=False),
        sa.Column("n_sentences", sa.Integer(), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("matrix", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["encoder_id"], ["encoders.id"], name=op.f("fk_anchor_embeddings_encoder_id_encoders")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_anchor_embeddings")),
        sa.UniqueConstraint(
            "anchor_set_id",
            "version",
            "encoder_id",
            "content_hash",
            name="uq_anchor_embeddings_key",
        ),
    )
    op.create_table(
        "images",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("sop_uid", sa.String(length=64), nullable=False),
        sa.Column("study_id", sa.Integer(), nullable=False),
        sa.Column("series_uid", sa.String(length=64), nullable=True),
        sa.Column("patient_id", sa.String(length=64), nullable=True),
        sa.Column("patient_sex", sa.String(length=16), nullable=True),
        sa.Column("patient_age_years", sa.Float(), nullable=True),
        sa.Column("study_date", sa.Date(), nullable=True),
        sa.Column("view_position", sa.String(length=16), nullable=True),
        sa.Column("manufacturer", sa.String(length=128), nullable=True),
        sa.Column("body_part", sa.String(length=64), nullable=True),
        sa.Column("photometric", sa.String(length=16), nullable=True),
        sa.Column("modality", sa.String(length=16), nullable=True),
        sa.Column("pixel_rows", sa.Integer(), nullable=True),
        sa.Column("pixel_columns", sa.Integer(), nullable=True),
        sa.Column("pixel_spacing_row_mm", sa.Float(), nullable=True),
        sa.Column("pixel_spacing_col_mm", sa.Float(), nullable=True),
        sa.Column("transfer_syntax", sa.String(length=64), nullable=True),
        sa.Column("source_format", sa.String(length=16), nullable=True),
        sa.Column("pixel_sha256", sa.String(length=64), nullable=False),
        sa.Column("source_path", sa.Text(), nullable=True),
        sa.Column("split", sa.String(length=16), nullable=True),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("ingested_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["ingest_runs.id"], name=op.f("fk_images_run_id_ingest_runs")
        ),
        sa.ForeignKeyConstraint(
            ["study_id"], ["studies.id"], name=op.f("fk_images_study_id_studies")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_images")),
        sa.UniqueConstraint("sop_uid", name=op.f("uq_images_sop_uid")),
    )
    op.create_index("ix_images_patient_id", "images", ["patient_id"])
    op.create_index("ix_images_split", "images", ["split"])
    op.create_index("ix_images_study_id", "images", ["study_id"])
    op.create_table(
        "embeddings",
        sa.Column("encoder_id", sa.String(length=200), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("dim", sa.Integer(), nullable=False),
        sa.Column("vector", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(
            ["encoder_id"], ["encoders.id"], name=op.f("fk_embeddings_encoder_id_encoders")
        ),
        sa.ForeignKeyConstraint(
            ["image_id"],
            ["images.id"],
            name=op.f("fk_embeddings_image_id_images"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("encoder_id", "image_id", name=op.f("pk_embeddings")),
    )
    op.create_index("ix_embeddings_image_id", "embeddings", ["image_id"])
    op.create_table(
        "ingest_outcomes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("outcome", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("sop_uid", sa.String(length=64), nullable=True),
        sa.Column("image_id", sa.Integer(), nullable=True),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "outcome IN ('ingested', 'embedded', 'already-present', 'rejected', 'conflict')",
            name=op.f("ck_ingest_outcomes_outcome"),
        ),
        sa.ForeignKeyConstraint(
            ["image_id"],
            ["images.id"],
            name=op.f("fk_ingest_outcomes_image_id_images"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["ingest_runs.id"], name=op.f("fk_ingest_outcomes_run_id_ingest_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_outcomes")),
    )
    op.create_index("ix_ingest_outcomes_run_id", "ingest_outcomes", ["run_id"])
    op.create_table(
        "labels",
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("finding", sa.String(length=64), nullable=False),
        sa.Column("value", sa.Float(), nullable=True),
        sa.CheckConstraint(
            "value IS NULL OR value IN (-1.0, 0.0, 1.0)", name=op.f("ck_labels_value")
        ),
        sa.ForeignKeyConstraint(
            ["image_id"], ["images.id"], name=op.f("fk_labels_image_id_images"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("image_id", "finding", name=op.f("pk_labels")),
    )
    op.create_table(
        "source_files",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("path_key", sa.String(length=64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("mtime_ns", sa.BigInteger(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["image_id"],
            ["images.id"],
            name=op.f("fk_source_files_image_id_images"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_source_files")),
        sa.UniqueConstraint("path_key", name=op.f("uq_source_files_path_key")),
    )
    op.create_index("ix_source_files_image_id", "source_files", ["image_id"])

    op.create_table(
        "archive_revision",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_archive_revision")),
    )


def downgrade() -> None:
    op.drop_table("archive_revision")
    op.drop_index("ix_source_files_image_id", table_name="source_files")
    op.drop_table("source_files")
    op.drop_table("labels")
    op.drop_index("ix_ingest_outcomes_run_id", table_name="ingest_outcomes")
    op.drop_table("ingest_outcomes")
    op.drop_index("ix_embeddings_image_id", table_name="embeddings")
    op.drop_table("embeddings")
    op.drop_index("ix_images_study_id", table_name="images")
    op.drop_index("ix_images_split", table_name="images")
    op.drop_index("ix_images_patient_id", table_name="images")
    op.drop_table("images")
    op.drop_table("anchor_embeddings")
    op.drop_table("studies")
    op.drop_table("ingest_runs")
    op.drop_table("encoders")
