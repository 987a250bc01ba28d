"""Cancelling a task: a pending one leaves the queue; a running one is ended by the server at once.

The server ends a running task as cancelled (its steps not ended with it), revokes its actions token,
and cancels the tasks its actions started that have not ended. Its agent learns it from its next lease
renewal or step write (410) and stops the reconciliation, which stops the running action. The cluster
is left as it is: a change cancelled half done may need a retry or a restore.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.errors import Conflict, NotFound
from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.services import auth, backups, deployment_status, workflow
from styrmin_backend.services.task_models import Task
from styrmin_backend.store.db import read_for_update
from styrmin_backend.store.models import TaskRow

CANCELLED_ERROR = (
    "Cancelled by {by} at {at}. Styrmin left the cluster as it was: a change cancelled half done may "
    "need a retry or a restore."
)
CANCELLED_BEFORE_START = "Cancelled by {by} at {at}, before it started: nothing of it was done."
CANCELLED_WITH_PARENT = "Cancelled with task {parent}, whose action started it ({by} cancelled that task)."


def prefect_canceller(flow_run_id: str) -> str:
    """Who cancelled a task whose action's flow run was cancelled in the Prefect UI."""
    return f"the Prefect UI (flow run {flow_run_id})"[:64]


def cancel_task(session: Session, task_id: int, *, by: str) -> Task:
    """Cancel task ``task_id`` on behalf of ``by``; raises NotFound, or Conflict when it has ended."""
    row = read_for_update(session, TaskRow, task_id)
    if row is None:
        raise NotFound(f"There is no task {task_id}.", field="task_id")
    if TaskStatus(row.status).ended:
        raise Conflict(
            f"Task {task_id} already ended as {row.status}; only a pending or running task can be "
            "cancelled. Request the change again (or retry the task) to run it once more.",
            field="task_id",
        )
    at = utcnow().strftime("%Y-%m-%d %H:%M:%S UTC")
    said = CANCELLED_BEFORE_START if row.status == TaskStatus.PENDING.value else CANCELLED_ERROR
    _cancel(session, row, by=by, error=said.format(by=by, at=at))
    return Task.model_validate(row)


def _cancel(session: Session, row: TaskRow, *, by: str, error: str) -> None:
    # The tasks its actions started end first, so that its result lists them as cancelled.
    for child in session.scalars(
        select(TaskRow)
        .where(
            TaskRow.parent_task_id == row.id,
            TaskRow.status.in_([TaskStatus.PENDING.value, TaskStatus.RUNNING.value]),
        )
        .order_by(TaskRow.id)
    ):
        _cancel(session, child, by=by, error=CANCELLED_WITH_PARENT.format(parent=row.id, by=by))
    running = row.status == TaskStatus.RUNNING.value
    workflow.cancel_task(session, row.id, error=error, by=by)
    row.stopped_at = None if running else row.cancelled_at  # a pending task has nothing to stop
    row.lease_expires_at = None
    if row.actions_token_id is not None:
        auth.revoke_actions_token(session, row.actions_token_id)
    backups.record_backup_end(session, row)
    deployment_status.record_task_end(session, row)


def record_work_stopped(session: Session, task_id: int, agent_id: int) -> None:
    """Note that the agent running cancelled task ``task_id`` stopped its work (``--wait`` waits for it)."""
    row = session.get(TaskRow, task_id)
    if row is None:
        raise NotFound(f"There is no task {task_id}.", field="task_id")
    if row.status != TaskStatus.CANCELLED.value or row.claimed_by != agent_id:
        raise Conflict(f"Task {task_id} is {row.status} and not held by this agent.", field="task_id")
    row.stopped_at = row.stopped_at or utcnow()
