"""The archive change log the archive index updates from (issue 31).

Revision ID: 0008_archive_index
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_archive_index"
down_revision = "0007_audit_anchor"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "archive_changes",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.Column("image_id", sa.Integer(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_archive_changes")),
    )
    op.create_index("ix_archive_changes_revision", "archive_changes", ["revision"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_archive_changes_revision", table_name="archive_changes")
    op.drop_table("archive_changes")
