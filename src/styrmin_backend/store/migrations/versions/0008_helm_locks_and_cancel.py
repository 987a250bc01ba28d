"""One Helm operation at a time per deployment (a lease-based lock row), and cancelled tasks.

``helm_locks`` holds a row per release whose Helm operation runs now: the task and agent doing it,
and when its lease runs out (a crashed holder's lock expires). On ``tasks``: who cancelled a task and
when, when its work stopped (its agent said so), and the task whose Helm operation a running task
waits for.

Revision ID: 0008_helm_locks_and_cancel
Revises: 0007_encrypt_secret_values
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008_helm_locks_and_cancel"
down_revision = "0007_encrypt_secret_values"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "helm_locks",
        sa.Column("release_key", sa.String(200), primary_key=True),
        sa.Column("deployment_name", sa.String(53), nullable=False),
        sa.Column("holder_task_id", _ID, nullable=False),
        sa.Column("holder_agent_id", _ID, nullable=False),
        sa.Column("acquired_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("cancelled_by", sa.String(64), nullable=True))
        batch_op.add_column(sa.Column("cancelled_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("stopped_at", sa.DateTime(timezone=True), nullable=True))
        batch_op.add_column(sa.Column("waits_for_helm_of_task_id", _ID, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("waits_for_helm_of_task_id")
        batch_op.drop_column("stopped_at")
        batch_op.drop_column("cancelled_at")
        batch_op.drop_column("cancelled_by")
    op.drop_table("helm_locks")
