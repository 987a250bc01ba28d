"""A task's log: its actions' log lines, read from Prefect by the server, and their commands' output."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Path, Query, Request
from pydantic import BaseModel, Field

from styrmin_backend.api.deps import api_router, authenticate_request, short_transaction
from styrmin_backend.api.schemas import MAX_ID
from styrmin_backend.services import task_logs
from styrmin_backend.services.task_logs import LOG_PAGE_MAX_LINES, FlowRunLogs

router = api_router(tags=["tasks"])


class LogLineOut(BaseModel):
    step: int = Field(description="The step's number, counted from 1 as `tasks get` shows it.")
    step_name: str
    action: str
    timestamp: datetime
    level: str
    message: str = Field(description="Redacted: secret values and common forms of secrets are <redacted>.")


class StepOutputOut(BaseModel):
    step: int
    step_name: str
    output_tail: str
    output_truncated: bool


class TaskLogsOut(BaseModel):
    task_id: int
    lines: list[LogLineOut]
    next_offset: int = Field(description="Read on from here (`offset`) for the lines that follow.")
    complete: bool = Field(description="True once the task has ended and every line was read.")
    outputs: list[StepOutputOut] = Field(description="The stored end of each failed command's output.")
    prefect_error: str | None = Field(description="Why Prefect's lines could not be read now, if so.")


@router.get("/tasks/{task_id}/logs", response_model=TaskLogsOut)
def get_task_logs(
    task_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    request: Request,
    step: Annotated[int | None, Query(ge=1, le=10_000, description="Only this step (from 1).")] = None,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=LOG_PAGE_MAX_LINES)] = 200,
) -> TaskLogsOut:
    """The log lines of the task's actions (their Prefect flow runs, oldest first) and the stored output
    of their commands. Every signed-in user may read them; secrets are redacted."""
    with short_transaction(request) as db:
        authenticate_request(request, db)  # every role may read a task's log
        found = task_logs.log_sources(db, task_id, step)
    # Prefect is read with no database transaction open.
    reader: FlowRunLogs = request.app.state.flow_run_logs()
    page = task_logs.read_task_logs(reader, found, offset, limit)
    return TaskLogsOut(
        task_id=page.task_id,
        lines=[
            LogLineOut(
                step=line.position + 1,
                step_name=line.step_name,
                action=line.action,
                timestamp=line.timestamp,
                level=line.level,
                message=line.message,
            )
            for line in page.lines
        ],
        next_offset=page.next_offset,
        complete=page.complete,
        outputs=[
            StepOutputOut(
                step=out.position + 1,
                step_name=out.step_name,
                output_tail=out.output_tail,
                output_truncated=out.output_truncated,
            )
            for out in page.outputs
        ],
        prefect_error=page.prefect_error,
    )
