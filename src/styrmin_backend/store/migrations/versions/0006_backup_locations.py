"""Backup locations: a storage location per cluster set by an administrator, and the one each backup used.

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
    with op.batch_alter_table("backups") as batch:
        batch.add_column(sa.Column("location_id", _ID, nullable=True))
        batch.create_foreign_key(
            "fk_backups_location_id", "backup_locations", ["location_id"], ["id"], ondelete="RESTRICT"
        )


def downgrade() -> None:
    with op.batch_alter_table("backups") as batch:
        batch.drop_constraint("fk_backups_location_id", type_="foreignkey")
        batch.drop_column("location_id")
    op.drop_index("ix_backup_locations_cluster_id", table_name="backup_locations")
    op.drop_table("backup_locations")
