"""When each agent instance's presence connection was last seen, so a list shows the live ones.

The server that holds an instance's presence connection notes ``seen_at`` at its connection and at
each heartbeat (every 15 s). An instance whose server crashed keeps its row, but its ``seen_at``
stops moving: lists of an agent's processes leave it out (``domain.outages.instance_connected``).
Rows written before this column (NULL) count from their ``connected_at``.

Revision ID: 0012_agent_instances_seen
Revises: 0011_agent_instances
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012_agent_instances_seen"
down_revision = "0011_agent_instances"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("agent_instances", schema=None) as batch_op:
        batch_op.add_column(sa.Column("seen_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("agent_instances", schema=None) as batch_op:
        batch_op.drop_column("seen_at")
