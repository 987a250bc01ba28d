"""Agents' instances: which process of an agent claimed a task, and its presence connections.

``agent_instances`` holds a row per running process of an agent (its instance) that keeps a presence
connection open to a server, with a count of its connections. ``tasks.claimed_by_instance`` names
the instance that claimed a task. When an instance's connection closes and it does not connect
again within a few seconds, its running tasks end failed at once, instead of when their leases run
out (see services.agents.end_tasks_of_a_gone_instance).

Revision ID: 0011_agent_instances
Revises: 0010_tasks_type_status_index
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011_agent_instances"
down_revision = "0010_tasks_type_status_index"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "agent_instances",
        sa.Column(
            "agent_id",
            _ID,
            sa.ForeignKey("agents.id", ondelete="CASCADE"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column("instance", sa.String(64), primary_key=True),
        sa.Column("connection", sa.Integer(), nullable=False),
        sa.Column("connected_at", sa.DateTime(timezone=True), nullable=False),
    )
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.add_column(sa.Column("claimed_by_instance", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("tasks", schema=None) as batch_op:
        batch_op.drop_column("claimed_by_instance")
    op.drop_table("agent_instances")
