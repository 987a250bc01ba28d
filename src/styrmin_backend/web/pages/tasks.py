"""The task view and its live part."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import HTMLResponse

from styrmin_backend.domain.errors import Conflict
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.services import cancel, changes, tasks
from styrmin_backend.web import _views
from styrmin_backend.web._common import (
    Form,
    WebRoute,
    check_form,
    confirm_page,
    is_confirmed,
    prefect_ui_url,
    render,
    see_other,
    unit,
    viewer_of,
)

router = APIRouter(route_class=WebRoute, include_in_schema=False)


@router.get("/tasks/{task_id}")
def task_page(request: Request, task_id: Annotated[int, Path(ge=1, le=2**63 - 1)]) -> HTMLResponse:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        view = _views.load_task_view(session, task_id, prefect_ui_url(request))
        return render(request, "task.html", viewer, view=view)


@router.get("/tasks/{task_id}/live")
def task_live(request: Request, task_id: Annotated[int, Path(ge=1, le=2**63 - 1)]) -> HTMLResponse:
    """The task's status and steps, polled by the page while the task runs."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        view = _views.load_task_view(session, task_id, prefect_ui_url(request))
        return render(request, "_task_live.html", viewer, view=view)


@router.post("/tasks/{task_id}/retry")
def retry(request: Request, task_id: Annotated[int, Path(ge=1, le=2**63 - 1)], form: Form) -> Response:
    """Retry a failed task: asks to confirm, then records the change again and shows the new task."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
        if is_confirmed(form):
            recorded = changes.retry_task(session, task_id, by=viewer.principal)
            target = (
                f"/tasks/{recorded.task.id}" if recorded.task else f"/deployments/{recorded.deployment.name}"
            )
            return see_other(target)
        task = tasks.get_task_detail(session, task_id).task
        refusal = changes.retry_refused(session, task)
        if refusal is not None:
            raise Conflict(refusal, field="task_id")
        lines = [
            f"This requests the {task.type} change of deployment {task.deployment_name} again, as a new "
            "revision with a task of its own; the failed task stays as it is.",
        ]
        return confirm_page(
            request,
            viewer,
            title=f"Retry {task.type} task #{task_id}?",
            lines=lines,
            action=f"/tasks/{task_id}/retry",
            button="Retry",
            cancel=f"/tasks/{task_id}",
        )


@router.post("/tasks/{task_id}/cancel")
def cancel_task(request: Request, task_id: Annotated[int, Path(ge=1, le=2**63 - 1)], form: Form) -> Response:
    """Cancel a pending or running task: asks to confirm, saying what is left as it is, then cancels it."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
        if is_confirmed(form):
            cancel.cancel_task(session, task_id, by=viewer.principal.username)
            return see_other(f"/tasks/{task_id}")
        task = tasks.get_task_detail(session, task_id).task
        if TaskStatus(task.status).ended:
            raise Conflict(f"Task {task_id} already ended as {task.status}; there is nothing to cancel.")
        if task.status == TaskStatus.PENDING:
            lines = [
                f"The {task.type} change of deployment {task.deployment_name} leaves the queue: it never runs."
            ]
        else:
            lines = [
                f"This stops the {task.type} task of deployment {task.deployment_name} where it is: its running "
                "action is stopped, and so are the tasks its actions started.",
                "Styrmin does not undo what the task did so far: a half-done upgrade may need a retry or a "
                "restore.",
            ]
        return confirm_page(
            request,
            viewer,
            title=f"Cancel {task.type} task #{task_id}?",
            lines=lines,
            action=f"/tasks/{task_id}/cancel",
            button="Cancel the task",
            cancel=f"/tasks/{task_id}",
            back="Keep it",
            danger=True,
        )
