"""PACS ledger of the DICOMweb ingest: per-study completeness and per-instance outcomes.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pacs_studies",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("study_uid", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("expected_instances", sa.Integer(), nullable=False),
        sa.Column("stored_instances", sa.Integer(), nullable=False),
        sa.Column("rejected_instances", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('partial', 'complete')", name=op.f("ck_pacs_studies_status")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["ingest_runs.id"], name=op.f("fk_pacs_studies_run_id_ingest_runs")
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pacs_studies")),
        sa.UniqueConstraint("source", "study_uid", name=op.f("uq_pacs_studies_source_study_uid")),
    )
    op.create_table(
        "pacs_instances",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("source", sa.String(length=255), nullable=False),
        sa.Column("study_uid", sa.String(length=64), nullable=False),
        sa.Column("series_uid", sa.String(length=64), nullable=False),
        sa.Column("sop_uid", sa.String(length=64), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('stored', 'rejected', 'conflict', 'transfer-failed')",
            name=op.f("ck_pacs_instances_status"),
        ),
        sa.ForeignKeyConstraint(
            ["image_id"],
            ["images.id"],
            name=op.f("fk_pacs_instances_image_id_images"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_pacs_instances")),
        sa.UniqueConstraint("source", "sop_uid", name=op.f("uq_pacs_instances_source_sop_uid")),
    )
    op.create_index("ix_pacs_instances_source_study_uid", "pacs_instances", ["source", "study_uid"])


def downgrade() -> None:
    op.drop_index("ix_pacs_instances_source_study_uid", table_name="pacs_instances")
    op.drop_table("pacs_instances")
    op.drop_table("pacs_studies")
