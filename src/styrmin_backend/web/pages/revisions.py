"""A deployment's revisions and rolling back to one; a task's log; the previews on confirm pages."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import HTMLResponse
from sqlalchemy.orm import Session

from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.secrets import conceal_configuration
from styrmin_backend.services import changes, desired_state, history, preview, task_logs
from styrmin_backend.web._common import (
    Form,
    Viewer,
    WebRoute,
    check_form,
    confirm_page,
    dry_run,
    is_confirmed,
    render,
    see_other,
    text,
    unit,
    viewer_of,
)

router = APIRouter(route_class=WebRoute, include_in_schema=False)


def preview_for(
    request: Request,
    viewer: Viewer,
    name: str,
    record: Callable[[Session], Sequence[changes.Recorded]],
    notes: Callable[[Session], list[str]] | None = None,
) -> preview.Preview:
    """What ``record`` (the change's service call) would do, for a confirm page: planned in a session
    that is rolled back, then rendered once no transaction is open."""
    with dry_run(request) as session:
        planned = preview.plan_preview(
            session,
            by=viewer.principal,
            name=name,
            record=lambda: record(session),
            notes=(lambda: notes(session)) if notes is not None else None,
        )
    return preview.render_preview(planned)


@router.get("/deployments/{name}/revisions")
def revisions_page(request: Request, name: str) -> HTMLResponse:
    """Every revision of the deployment, newest first, each with a way back to it."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        deployment = changes.read_deployment(session, name)
        entries = history.deployment_history(session, name)
        shown = [(entry, conceal_configuration(entry.configuration)) for entry in entries]
        return render(request, "revisions.html", viewer, deployment=deployment, revisions=shown)


def _rollback_notes(name: str, revision: int) -> Callable[[Session], list[str]]:
    def notes(session: Session) -> list[str]:
        deployment = changes.get_deployment(session, name)
        target = history.get_revision(session, name, revision)
        backup = history.backup_at_versions(session, deployment, target)
        if backup is None:
            return []
        return [
            f"If the driver refuses to go back to application {backup.app_version}, restore backup "
            f"#{backup.backup_id}, taken at revision {backup.revision} with those versions."
        ]

    return notes


@router.post("/deployments/{name}/rollback")
def rollback(request: Request, name: str, form: Form) -> Response:
    """Roll back to a revision: shows the preview to confirm, then records the change."""
    raw = text(form, "to_revision").strip()
    revision = int(raw) if raw.isdigit() else 0
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
        if is_confirmed(form) and revision:
            rolled = desired_state.rollback_deployment(session, name, revision, by=viewer.principal)
            first = rolled.recorded[0].task if rolled.recorded else None
            return see_other(f"/tasks/{first.id}" if first else f"/deployments/{name}?notice=unchanged")
    shown = preview_for(
        request,
        viewer,
        name,
        lambda session: (
            desired_state.rollback_deployment(session, name, revision, by=viewer.principal).recorded
        ),
        _rollback_notes(name, revision),
    )
    if shown.nothing_to_do:
        return see_other(f"/deployments/{name}?notice=unchanged")
    return confirm_page(
        request,
        viewer,
        title=f'Roll "{name}" back to revision {revision}?',
        lines=[
            f"This brings back revision {revision}'s driver version, application version and configuration."
        ],
        action=f"/deployments/{name}/rollback",
        hidden={"to_revision": str(revision)},
        button="Roll back",
        cancel=f"/deployments/{name}/revisions",
        preview=shown,
    )


@router.get("/tasks/{task_id}/logs")
def task_logs_page(
    request: Request,
    task_id: Annotated[int, Path(ge=1, le=2**63 - 1)],
    step: Annotated[int | None, Query(ge=1, le=10_000)] = None,
) -> HTMLResponse:
    """The log lines of the task's actions (read from Prefect by the server) and their stored output."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        found = task_logs.log_sources(session, task_id, step)
    reader: task_logs.FlowRunLogs = request.app.state.flow_run_logs()
    page = task_logs.read_task_logs(reader, found, 0, task_logs.LOG_PAGE_MAX_LINES)
    return render(
        request, "task_logs.html", viewer, section="tasks", task_id=task_id, step=step, page=page, found=found
    )
