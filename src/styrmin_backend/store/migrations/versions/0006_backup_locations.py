"""Backup locations and schedules: a storage location per cluster set by an administrator, the one each
backup used, and a backup schedule with retention per deployment.

Revision ID: 0006_backup_locations
Revises: 0005_backups
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_backup_locations"
down_revision = "0005_backups"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "backup_locations",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column("cluster", sa.String(64), nullable=False),
        sa.Column("location", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("requested_by", sa.String(64), nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("checked_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_backup_locations_cluster_id", "backup_locations", ["cluster", "id"])
    op.create_table(
        "backup_schedules",
        sa.Column("id", _ID, primary_key=True, autoincrement=True),
        sa.Column(
            "deployment_id",
            _ID,
            sa.ForeignKey("deployments.id", ondelete="CASCADE"),
            nullable=False,
            unique=True,
        ),
        sa.Column("cron", sa.String(100), nullable=False),
        sa.Column("keep_count", sa.Integer(), nullable=True),
        sa.Column("keep_days", sa.Integer(), nullable=True),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("updated_by", sa.String(64), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_backup_schedules_next_run_at", "backup_schedules", ["next_run_at"])
    with op.batch_alter_table("backups") as batch:
        batch.add_column(sa.Column("location_id", _ID, nullable=True))
        batch.create_foreign_key(
            "fk_backups_location_id", "backup_locations", ["location_id"], ["id"], ondelete="RESTRICT"
        )


def downgrade() -> None:
    op.drop_index("ix_backup_schedules_next_run_at", table_name="backup_schedules")
    op.drop_table("backup_schedules")
    with op.batch_alter_table("backups") as batch:
        batch.drop_constraint("fk_backups_location_id", type_="foreignkey")
        batch.drop_column("location_id")
    op.drop_index("ix_backup_locations_cluster_id", table_name="backup_locations")
    op.drop_table("backup_locations")
