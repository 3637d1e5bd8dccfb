"""Thumbnails written at ingest; per-image accession number and default window for the viewer.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "thumbnails",
        sa.Column("image_id", sa.Integer(), nullable=False),
        sa.Column("max_side", sa.Integer(), nullable=False),
        sa.Column("pixel_rows", sa.Integer(), nullable=False),
        sa.Column("pixel_columns", sa.Integer(), nullable=False),
        sa.Column("png", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["image_id"],
            ["images.id"],
            name=op.f("fk_thumbnails_image_id_images"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("image_id", name=op.f("pk_thumbnails")),
    )
    # plain nullable columns: SQLite adds them in place, no table rebuild
    op.add_column("images", sa.Column("accession_number", sa.String(length=64), nullable=True))
    op.add_column("images", sa.Column("window_center", sa.Float(), nullable=True))
    op.add_column("images", sa.Column("window_width", sa.Float(), nullable=True))
    op.create_index("ix_images_accession_number", "images", ["accession_number"])


def downgrade() -> None:
    op.drop_index("ix_images_accession_number", table_name="images")
    with op.batch_alter_table("images") as batch:
        batch.drop_column("window_width")
        batch.drop_column("window_center")
        batch.drop_column("accession_number")
    op.drop_table("thumbnails")
