"""Tasks: the list with filters and pages, and one task with its steps."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query

from styrmin_backend.api.deps import Db, Reader, Writer
from styrmin_backend.api.routes.deployments import change_out
from styrmin_backend.api.schemas import MAX_ID, ChangeOut, ConfigurationIn, TaskOut, TaskPageOut, TaskSummary
from styrmin_backend.domain.tasks import TaskStatus, TaskType
from styrmin_backend.services import changes, tasks
from styrmin_backend.services.tasks import MAX_PAGE_SIZE

router = APIRouter(tags=["tasks"])


@router.get("/tasks", response_model=TaskPageOut)
def list_tasks(
    db: Db,
    _: Reader,
    deployment: Annotated[str | None, Query(max_length=53)] = None,
    type: Annotated[TaskType | None, Query()] = None,
    status: Annotated[TaskStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 50,
    before: Annotated[
        int | None, Query(ge=1, le=MAX_ID, description="Cursor: tasks with a smaller id.")
    ] = None,
) -> TaskPageOut:
    """Tasks newest first, filtered by deployment, type and status."""
    page = tasks.list_tasks(
        db, deployment=deployment, task_type=type, status=status, limit=limit, before=before
    )
    return TaskPageOut(items=[TaskSummary.of(row) for row in page.items], next_before=page.next_before)


@router.get("/tasks/{task_id}", response_model=TaskOut)
def get_task(task_id: Annotated[int, Path(ge=1, le=MAX_ID)], db: Db, _: Reader) -> TaskOut:
    """One task: its steps in order with errors, notes and output, and the tasks it started."""
    return TaskOut.of_detail(tasks.get_task_detail(db, task_id))


@router.post("/tasks/{task_id}/retry", response_model=ChangeOut, status_code=202)
def retry_task(task_id: Annotated[int, Path(ge=1, le=MAX_ID)], db: Db, principal: Writer) -> ChangeOut:
    """Request a failed task's change again: a new revision and a new task (409 unless the task failed
    and is the latest of its type for its deployment)."""
    return change_out(db, changes.retry_task(db, task_id, by=principal))


@router.get("/tasks/{task_id}/configuration", response_model=ConfigurationIn)
def get_task_configuration(
    task_id: Annotated[int, Path(ge=1, le=MAX_ID)], db: Db, principal: Reader
) -> ConfigurationIn:
    """For the task's own actions only: the configuration its change applies, secret values included."""
    return ConfigurationIn.model_validate(tasks.configuration_for_actions(db, task_id, by=principal))
