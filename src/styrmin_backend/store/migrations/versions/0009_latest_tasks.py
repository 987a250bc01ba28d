"""The newest requested task of each type per deployment, kept beside the tasks by a trigger.

A deployment's status is decided from its latest requested change of each type. Found by grouping
over every task it ever had, a list of deployments grew slower with their histories (100
deployments: 18 ms with 100 tasks each, 77 ms with 3,000). ``latest_tasks`` holds one row per
deployment and type. A trigger on ``tasks`` writes it, not the servers: while a rolling upgrade
runs, servers of the previous version keep recording changes, and those must count too. This
migration fills it from the tasks recorded before.

Revision ID: 0009_latest_tasks
Revises: 0008_helm_locks_and_cancel
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009_latest_tasks"
down_revision = "0008_helm_locks_and_cancel"
branch_labels = None
depends_on = None

_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")

# A requested task (no parent task) becomes its deployment's latest of its type, unless a newer one
# is there already. Two requests of one deployment are ordered by the lock on its row.
_UPSERT = """
INSERT INTO latest_tasks (deployment_id, type, task_id) VALUES (NEW.deployment_id, NEW.type, NEW.id)
ON CONFLICT (deployment_id, type) DO UPDATE SET task_id = excluded.task_id
WHERE latest_tasks.task_id < excluded.task_id;
"""
_REQUESTED = "NEW.parent_task_id IS NULL AND NEW.deployment_id IS NOT NULL"


def upgrade() -> None:
    op.create_table(
        "latest_tasks",
        sa.Column("deployment_id", _ID, nullable=False),
        sa.Column("type", sa.String(16), nullable=False),
        sa.Column("task_id", _ID, nullable=False),
        sa.ForeignKeyConstraint(["deployment_id"], ["deployments.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["task_id"], ["tasks.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("deployment_id", "type"),
    )
    # The trigger before the fill: on PostgreSQL creating it waits for, then holds off, other
    # servers' inserts of tasks until this migration commits, so no task falls between the two.
    if op.get_bind().dialect.name == "postgresql":
        op.execute(
            "CREATE FUNCTION styrmin_note_latest_task() RETURNS trigger LANGUAGE plpgsql AS $$\n"
            f"BEGIN{_UPSERT}RETURN NULL;\nEND\n$$"
        )
        op.execute(
            "CREATE TRIGGER tasks_note_latest AFTER INSERT ON tasks FOR EACH ROW "
            f"WHEN ({_REQUESTED}) EXECUTE FUNCTION styrmin_note_latest_task()"
        )
    else:
        op.execute(
            f"CREATE TRIGGER tasks_note_latest AFTER INSERT ON tasks WHEN {_REQUESTED}\nBEGIN{_UPSERT}END"
        )
    op.execute(
        "INSERT INTO latest_tasks (deployment_id, type, task_id) "
        "SELECT deployment_id, type, max(id) FROM tasks "
        "WHERE deployment_id IS NOT NULL AND parent_task_id IS NULL "
        "GROUP BY deployment_id, type"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER tasks_note_latest ON tasks")
        op.execute("DROP FUNCTION styrmin_note_latest_task()")
    else:
        op.execute("DROP TRIGGER tasks_note_latest")
    op.drop_table("latest_tasks")
