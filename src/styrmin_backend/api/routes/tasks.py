"""Tasks: the list with filters and pages, and one task with its steps."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from sqlalchemy.orm import Session

from styrmin_backend.api.deps import Db, Reader, Writer, api_router, require, short_transaction
from styrmin_backend.api.pages import Cursor, next_link
from styrmin_backend.api.routes.deployments import change_out
from styrmin_backend.api.schemas import MAX_ID, ChangeOut, ConfigurationIn, TaskOut, TaskPageOut, TaskSummary
from styrmin_backend.domain.errors import InvalidInput
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.tasks import TaskStatus, TaskType
from styrmin_backend.services import cancel, changes, tasks
from styrmin_backend.services.tasks import MAX_PAGE_SIZE

MAX_WAIT_UNTIL_END_SECONDS = 60.0
"""The longest a read of one task waits for it to end."""
_END_POLL_SECONDS = 0.05
"""How often a waiting read looks at the task's status (one row, by its key) on a database that other
server processes share, unless a task's end in this process wakes it first."""
_END_POLL_SECONDS_ALONE = 1.0
"""The same on SQLite, where every task's end is a commit of this process and wakes the read at once:
a look now and then only guards against a missed wake-up. (At 50 ms, the primitives' waits for the
tasks they start were 7% of the server's CPU in an upgrade.)"""

router = api_router(tags=["tasks"])


@router.get("/tasks", response_model=TaskPageOut)
def list_tasks(
    db: Db,
    _: Reader,
    deployment: Annotated[str | None, Query(max_length=53)] = None,
    type: Annotated[TaskType | None, Query()] = None,
    status: Annotated[TaskStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE_SIZE)] = 50,
    before: Annotated[
        int | None,
        Query(ge=1, le=MAX_ID, description="Tasks with a smaller id (as cursor, kept for clients)."),
    ] = None,
    cursor: Cursor = None,
    *,
    request: Request,
    response: Response,
) -> TaskPageOut:
    """Tasks newest first, filtered by deployment, type and status; the next page is in the Link
    header, as for every list (and in ``next_before``)."""
    if cursor is not None:
        if not cursor.isdigit() or not 1 <= int(cursor) <= MAX_ID:
            raise InvalidInput(
                f'The cursor "{cursor}" is not one this list gave; list again without it.', field="cursor"
            )
        before = int(cursor)
    page = tasks.list_tasks(
        db, deployment=deployment, task_type=type, status=status, limit=limit, before=before
    )
    if page.next_before is not None:
        next_link(request, response, str(page.next_before))
    return TaskPageOut(
        items=[TaskSummary.model_validate(row) for row in page.items], next_before=page.next_before
    )


@router.get("/tasks/{task_id}", response_model=TaskOut)
async def get_task(
    task_id: Annotated[int, Path(ge=1, le=MAX_ID)],
    request: Request,
    wait_until_end: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_WAIT_UNTIL_END_SECONDS,
            description="Answer once the task has ended, or after this many seconds (a long poll).",
        ),
    ] = 0,
) -> TaskOut:
    """One task: its steps in order with errors, notes and output, and the tasks it started.

    With ``wait_until_end``, the answer waits until the task has ended or that many seconds have
    passed, so a caller waiting for a task learns of its end at once without asking many times a second.
    """

    # Each look at the database is a transaction of its own, so no connection is held while waiting;
    # a look that finds the task ended (or no wait asked) reads it in the same transaction.
    def authenticate_and_read() -> TaskOut | None:
        with short_transaction(request) as session:
            _reader(request, session)
            return _ended_or_none(session, task_id, wait_until_end > 0)

    def read_if_ended(at_the_end: bool) -> TaskOut | None:
        with short_transaction(request) as session:
            return _ended_or_none(session, task_id, not at_the_end)

    mark = tasks.task_end_mark()  # before the first look: an end right after it still wakes the wait
    found = await run_in_threadpool(authenticate_and_read)
    if found is not None:
        return found
    shared = request.app.state.claim_wakeups.shared_database
    poll = _END_POLL_SECONDS if shared else _END_POLL_SECONDS_ALONE
    deadline = time.monotonic() + wait_until_end
    while True:
        left = deadline - time.monotonic()
        if left > 0 and not await request.is_disconnected():
            await tasks.wait_for_task_end(task_id, mark, min(poll, left))
        mark = tasks.task_end_mark()
        last = deadline - time.monotonic() <= 0 or await request.is_disconnected()
        found = await run_in_threadpool(read_if_ended, last)
        if found is not None:
            return found


_reader = require(Role.READ_ONLY)


def _ended_or_none(session: Session, task_id: int, only_if_ended: bool) -> TaskOut | None:
    """The task as the API shows it; None when ``only_if_ended`` and it exists and has not ended."""
    if only_if_ended and tasks.task_is_waiting(session, task_id):
        return None
    return TaskOut.of_detail(tasks.get_task_detail(session, task_id))


@router.post("/tasks/{task_id}/retry", response_model=ChangeOut, status_code=202)
def retry_task(task_id: Annotated[int, Path(ge=1, le=MAX_ID)], db: Db, principal: Writer) -> ChangeOut:
    """Request a failed task's change again: a new revision and a new task (409 unless the task failed
    and is the latest of its type for its deployment)."""
    return change_out(db, changes.retry_task(db, task_id, by=principal))


@router.post("/tasks/{task_id}/cancel", response_model=TaskOut)
def cancel_task(task_id: Annotated[int, Path(ge=1, le=MAX_ID)], db: Db, principal: Writer) -> TaskOut:
    """Cancel a pending or running task (409 once it has ended).

    A pending task leaves the queue. A running one ends as cancelled at once, with its steps not ended
    and the tasks its actions started; its agent stops the running action. The cluster is left as it
    is: a change cancelled half done may need a retry or a restore.
    """
    cancel.cancel_task(db, task_id, by=principal.username)
    return TaskOut.of_detail(tasks.get_task_detail(db, task_id))


@router.get("/tasks/{task_id}/configuration", response_model=ConfigurationIn)
def get_task_configuration(
    task_id: Annotated[int, Path(ge=1, le=MAX_ID)], db: Db, principal: Reader
) -> ConfigurationIn:
    """For the task's own actions only: the configuration its change applies, secret values included."""
    return ConfigurationIn.model_validate(tasks.configuration_for_actions(db, task_id, by=principal))
