"""Sign-in state shared by every server process (issue 33): sessions, sign-in counts, viewer
grants.

Revision ID: 0006_sessions_throttle
Revises: 0005
Create Date: 2026-12-06
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_sessions_throttle"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "web_sessions",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("user_name", sa.String(length=64), nullable=False),
        sa.Column("client", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.Column("last_seen_at", sa.Float(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_web_sessions")),
        sa.UniqueConstraint("token_hash", name=op.f("uq_web_sessions_token_hash")),
    )
    op.create_index("ix_web_sessions_user_name", "web_sessions", ["user_name"])
    op.create_index("ix_web_sessions_expires_at", "web_sessions", ["expires_at"])
    op.create_table(
        "sign_in_counts",
        sa.Column("key", sa.String(length=200), nullable=False),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("locked_until", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_sign_in_counts")),
    )
    op.create_index("ix_sign_in_counts_updated_at", "sign_in_counts", ["updated_at"])
    op.create_table(
        "viewer_grants",
        sa.Column("token_hash", sa.String(length=64), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("user_name", sa.String(length=255), nullable=False),
        sa.Column("studies", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.CheckConstraint("kind IN ('grant', 'session')", name=op.f("ck_viewer_grants_kind")),
        sa.PrimaryKeyConstraint("token_hash", name=op.f("pk_viewer_grants")),
    )
    op.create_index("ix_viewer_grants_created_at", "viewer_grants", ["created_at"])


def downgrade() -> None:
    op.drop_table("viewer_grants")
    op.drop_table("sign_in_counts")
    op.drop_table("web_sessions")
