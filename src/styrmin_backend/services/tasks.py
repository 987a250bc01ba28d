"""Reading tasks: filtered pages of the list, and one task with its steps and links."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import bindparam, func, or_, select
from sqlalchemy.orm import Session

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.errors import NotAllowed, NotFound
from styrmin_backend.domain.outages import INSTANCE_SEEN_WITHIN
from styrmin_backend.domain.tasks import TaskStatus, TaskType
from styrmin_backend.domain.waiting import CONNECTED_WITHIN, why_task_waits
from styrmin_backend.services import workflow
from styrmin_backend.services.change_models import requested_of
from styrmin_backend.services.principal import Principal
from styrmin_backend.services.task_models import Step, Task
from styrmin_backend.store.models import (
    AgentInstanceRow,
    AgentRow,
    ChangeRow,
    DeploymentRow,
    StepRow,
    TaskRow,
)
from styrmin_backend.store.wakeups import TASK_ENDED, Mark, task_key

MAX_PAGE_SIZE = 500

_TASK_ENDS = TASK_ENDED.waiters()
"""This process's reads waiting for a task to end."""


def task_end_mark() -> Mark:
    """Take before reading whether a task has ended, then hand to :func:`wait_for_task_end`."""
    return _TASK_ENDS.mark()


async def wait_for_task_end(task_id: int, mark: Mark, timeout: float) -> None:
    """Return once task ``task_id`` ended through this process since ``mark`` (a committed transaction),
    or after ``timeout`` seconds. Ends in other processes are not seen: the caller reads the task again.

    Each wait is woken by its own task's end only: with many reads waiting (a fleet of upgrades, each
    watched), an end that woke them all made every one read its task again."""
    await _TASK_ENDS.wait(task_key(task_id), mark, timeout)


@dataclass(frozen=True)
class TaskPage:
    """Tasks newest first; ``next_before`` is the cursor of the next page, None on the last."""

    items: list[Task]
    next_before: int | None


@dataclass(frozen=True)
class StartedBy:
    """The hook step and task whose action started a task."""

    task_id: int
    task_type: str
    step_id: int
    step_name: str


@dataclass(frozen=True)
class TaskDetail:
    """A task with its steps in order, the tasks each step started, and what started it."""

    task: Task
    steps: list[Step]
    started_tasks: dict[int, list[Task]]
    started_by: StartedBy | None


def list_tasks(
    session: Session,
    *,
    deployment: str | None = None,
    task_type: TaskType | None = None,
    status: TaskStatus | None = None,
    limit: int = 50,
    before: int | None = None,
) -> TaskPage:
    """A page of tasks, newest first, filtered by deployment name, type and status."""
    query = select(TaskRow).order_by(TaskRow.id.desc()).limit(min(limit, MAX_PAGE_SIZE) + 1)
    if deployment is not None:
        query = query.where(TaskRow.deployment_name == deployment)
    if task_type is not None:
        query = query.where(TaskRow.type == task_type.value)
    if status is not None:
        query = query.where(TaskRow.status == status.value)
    if before is not None:
        query = query.where(TaskRow.id < before)
    rows = list(session.scalars(query))
    size = min(limit, MAX_PAGE_SIZE)
    items = with_waiting(session, [Task.model_validate(row) for row in rows[:size]])
    return TaskPage(items, rows[size - 1].id if len(rows) > size else None)


def last_tasks(session: Session, deployment_ids: Sequence[int]) -> dict[int, Task]:
    """The newest task of each deployment of ``deployment_ids`` (those with one), by deployment id:
    the same few queries for any number of deployments, where a list page asked once per deployment.

    Each deployment's newest task is one step down the (deployment, id) index: a grouped ``max``
    read every task of every deployment listed, and grew slower with their histories.
    """
    if not deployment_ids:
        return {}
    newest_of_each = (
        select(TaskRow.id)
        .where(TaskRow.deployment_id == DeploymentRow.id)
        .order_by(TaskRow.id.desc())
        .limit(1)
        .correlate(DeploymentRow)
        .scalar_subquery()
    )
    newest = session.scalars(select(newest_of_each).where(DeploymentRow.id.in_(deployment_ids))).all()
    ids = [task_id for task_id in newest if task_id is not None]  # None: a deployment without tasks
    if not ids:
        return {}
    # The ids as values, not as a subquery: PostgreSQL would hash-join the subquery with every task.
    items = with_waiting(
        session, Task.read_all(session, select(*TaskRow.__table__.columns).where(TaskRow.id.in_(ids)))
    )
    return {task.deployment_id: task for task in items if task.deployment_id}


def with_waiting(session: Session, items: list[Task]) -> list[Task]:
    """``items``, each pending or running one with why it waits (``domain.waiting``)."""
    clusters = {task.cluster for task in items if task.status in (TaskStatus.PENDING, TaskStatus.RUNNING)}
    if not clusters:
        return items
    now = utcnow()
    # As the Agents page counts them (``agent_state``): a process connected now, or a call within 60 s.
    process_connected = (
        select(AgentInstanceRow.agent_id)
        .where(
            AgentInstanceRow.agent_id == AgentRow.id,
            func.coalesce(AgentInstanceRow.seen_at, AgentInstanceRow.connected_at)
            >= now - INSTANCE_SEEN_WITHIN,
        )
        .exists()
    )
    connected: dict[str, int] = {
        cluster: count
        for cluster, count in session.execute(
            select(AgentRow.cluster, func.count())
            .where(
                AgentRow.cluster.in_(clusters),
                AgentRow.revoked_at.is_(None),
                or_(AgentRow.last_seen_at >= now - CONNECTED_WITHIN, process_connected),
            )
            .group_by(AgentRow.cluster)
        )
    }
    running: dict[str, int] = {
        cluster: count
        for cluster, count in session.execute(
            select(TaskRow.cluster, func.count())
            .where(
                TaskRow.cluster.in_(clusters),
                TaskRow.status == TaskStatus.RUNNING.value,
                TaskRow.parent_task_id.is_(None),
            )
            .group_by(TaskRow.cluster)
        )
    }
    return [
        task.model_copy(
            update={
                "waiting": why_task_waits(
                    TaskStatus(task.status),
                    task.cluster,
                    agents_connected=connected.get(task.cluster, 0),
                    tasks_running=running.get(task.cluster, 0),
                    helm_of_task_id=task.waits_for_helm_of_task_id,
                )
            }
        )
        for task in items
    ]


# Built once: an action's wait for each task it starts reads them (see services.agents).
_STARTED_BY = (
    select(TaskRow.type, StepRow.name)
    .join(StepRow, StepRow.task_id == TaskRow.id)
    .where(TaskRow.id == bindparam("task"), StepRow.id == bindparam("step"))
)
_TASK_STATUS = select(TaskRow.status).where(TaskRow.id == bindparam("task"))


def get_task_detail(session: Session, task_id: int) -> TaskDetail:
    """Task ``task_id`` with everything the task view shows; raises NotFound."""
    task = session.get(TaskRow, task_id)
    if task is None:
        raise NotFound(f"There is no task {task_id}.", field="task_id")
    steps = workflow.steps_of(session, task_id)
    started: dict[int, list[Task]] = {}
    for child in workflow.started_tasks(session, task_id):
        if child.parent_step_id is not None:
            started.setdefault(child.parent_step_id, []).append(Task.model_validate(child))
    started_by = None
    if task.parent_task_id is not None and task.parent_step_id is not None:
        found = session.execute(
            _STARTED_BY, {"task": task.parent_task_id, "step": task.parent_step_id}
        ).one_or_none()
        if found is not None:
            started_by = StartedBy(task.parent_task_id, found.type, task.parent_step_id, found.name)
    return TaskDetail(
        with_waiting(session, [Task.model_validate(task)])[0],
        [Step.model_validate(step) for step in steps],
        started,
        started_by,
    )


def task_is_waiting(session: Session, task_id: int) -> bool:
    """Whether task ``task_id`` exists and has not ended yet (one row read, for long polls)."""
    status = session.scalar(_TASK_STATUS, {"task": task_id})
    return status is not None and not TaskStatus(status).ended


def configuration_for_actions(session: Session, task_id: int, *, by: Principal) -> dict[str, Any]:
    """The configuration the change of ``task_id`` applies, secret values included, for its own actions.

    Only the actions token of that task may read it (``execute_commands(env_from_component=...)`` sets
    the user's env vars on its Job); everyone else reads a deployment's configuration with its secrets
    shown only as set.
    """
    if not by.is_actions_token or by.actions_task_id != task_id:
        raise NotAllowed(
            f"Only the actions of task {task_id} may read its configuration with secret values; "
            "read the deployment instead, where secrets are shown only as set."
        )
    task = session.get(TaskRow, task_id)
    if task is None:
        raise NotFound(f"There is no task {task_id}.", field="task_id")
    change = session.get(ChangeRow, task.change_id) if task.change_id else None
    requested = requested_of(change) if change is not None else None
    if requested is not None and requested.configuration is not None:
        return dict(requested.configuration)
    deployment = session.get(DeploymentRow, task.deployment_id) if task.deployment_id else None
    if deployment is None:
        raise NotFound(f"The deployment of task {task_id} no longer exists.", field="task_id")
    return deployment.configuration
