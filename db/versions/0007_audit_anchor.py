"""The audit trail's anchor in the store: its length and last line at the last record written,
per trail (issue 36).

Revision ID: 0007_audit_anchor
Revises: 0005
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007_audit_anchor"
down_revision = "0006_sessions_throttle"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_anchors",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("trail", sa.String(length=64), nullable=False),
        sa.Column("path", sa.Text(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("lines", sa.BigInteger(), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("last", sa.String(length=64), nullable=False),
        sa.Column("retired", sa.Text(), nullable=True),
        sa.Column("mac", sa.String(length=64), nullable=False),
        sa.Column("first_seen", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_anchors")),
        sa.UniqueConstraint("trail", name=op.f("uq_audit_anchors_trail")),
    )


def downgrade() -> None:
    op.drop_table("audit_anchors")
