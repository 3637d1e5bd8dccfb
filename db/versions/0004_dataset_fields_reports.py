"""Public data sets: per-image view group, data-set path and study id; per-study reports.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # plain nullable columns: SQLite adds them in place, no table rebuild
    op.add_column("images", sa.Column("view_group", sa.String(length=16), nullable=True))
    op.add_column("images", sa.Column("dataset_path", sa.Text(), nullable=True))
    op.add_column("images", sa.Column("dataset_study_id", sa.String(length=64), nullable=True))
    op.create_index("ix_images_view_group", "images", ["view_group"])
    op.create_index("ix_images_dataset_study_id", "images", ["dataset_study_id"])
    # images stored before: the view group follows from ViewPosition where it says
    op.execute(
        "UPDATE images SET view_group = 'frontal' WHERE upper(view_position) IN "
        "('PA', 'AP', 'AP AXIAL', 'PA LLD', 'AP LLD', 'AP RLD', 'PA RLD')"
    )
    op.execute(
        "UPDATE images SET view_group = 'lateral' WHERE upper(view_position) IN "
        "('LATERAL', 'LL', 'RL', 'LAT', 'XTABLE LATERAL')"
    )
    op.create_table(
        "reports",
        sa.Column("study_key", sa.String(length=64), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("source", sa.Text(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("study_key", name=op.f("pk_reports")),
    )


def downgrade() -> None:
    op.drop_table("reports")
    op.drop_index("ix_images_dataset_study_id", table_name="images")
    op.drop_index("ix_images_view_group", table_name="images")
    with op.batch_alter_table("images") as batch:
        batch.drop_column("dataset_study_id")
        batch.drop_column("dataset_path")
        batch.drop_column("view_group")
