"""Backups: one row per backup of a deployment, with its files and the task that took it.

Revision ID: 0005_backups
Revises: 0004_tokens_secrets
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005_backups"
down_revision = "0004_tokens_secrets"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "backups",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("deployment_id", _ID, sa.ForeignKey("deployments.id", ondelete="CASCADE"), nullable=False),
        sa.Column("deployment_name", sa.String(53), nullable=False),
        sa.Column("driver_name", sa.String(64), nullable=False),
        sa.Column("driver_version", sa.String(64), nullable=False),
        sa.Column("app_version", sa.String(64), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.Column("configuration", sa.JSON(), nullable=False),
        sa.Column("location", sa.String(512), nullable=False),
        sa.Column("key", sa.String(255), nullable=False),
        sa.Column("files", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("label", sa.String(16), nullable=False),
        sa.Column("requested_by", sa.String(64), nullable=False),
        sa.Column("task_id", _ID, sa.ForeignKey("tasks.id", ondelete="SET NULL"), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
    )
    op.create_index("ix_backups_deployment_id_id", "backups", ["deployment_id", "id"])
    op.create_index("ix_backups_task_id", "backups", ["task_id"])


def downgrade() -> None:
    op.drop_index("ix_backups_task_id", table_name="backups")
    op.drop_index("ix_backups_deployment_id_id", table_name="backups")
    op.drop_table("backups")
