"""An index of the tasks by type and status, for the task counts of ``/metrics``.

``styrmin_tasks`` counts every task by type and status at each scrape. With this index both engines
count from it alone instead of reading every task (300,000 tasks: 274 ms to 35 ms on SQLite, 87 ms
to 41 ms on PostgreSQL once vacuumed).

Revision ID: 0010_tasks_type_status_index
Revises: 0009_latest_tasks
"""

from __future__ import annotations

from alembic import op

revision = "0010_tasks_type_status_index"
down_revision = "0009_latest_tasks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_tasks_type_status", "tasks", ["type", "status"])


def downgrade() -> None:
    op.drop_index("ix_tasks_type_status", table_name="tasks")
