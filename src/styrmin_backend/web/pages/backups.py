"""The Backups section of the deployment page: the list, taking a backup, restoring one; and the way back
offered on a failed upgrade's page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request, Response
from fastapi.responses import HTMLResponse

from styrmin_backend.domain.errors import InvalidInput
from styrmin_backend.domain.roles import Role
from styrmin_backend.services import backup_locations, backup_schedules, backups, changes
from styrmin_backend.web._common import (
    HTMX_STOP_POLLING,
    Form,
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
from styrmin_backend.web.pages.backup_locations import location_view

router = APIRouter(route_class=WebRoute, include_in_schema=False)
TaskId = Annotated[int, Path(ge=1, le=2**63 - 1)]


@router.get("/deployments/{name}/backups")
def backups_section(request: Request, name: str) -> HTMLResponse:
    """The deployment's backups, newest first, with the buttons the viewer's role allows."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        row = changes.read_deployment(session, name)
        found = backups.list_backups(session, name)
        return render(
            request,
            "_backups.html",
            viewer,
            name=row.name,
            backups=found,
            can_back_up=backups.can_back_up(session, row),
            driver=f"{row.driver_name}@{row.running_driver_version or row.driver_version}",
            polling=any(b.status in ("pending", "running", "deleting") for b in found),
            cluster=row.cluster,
            schedule=backup_schedules.get_schedule(session, name),
            location=location_view(backup_locations.location_in_use(session, row.cluster)),
        )


@router.post("/deployments/{name}/backups")
def take_backup(request: Request, name: str, form: Form) -> Response:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
    if is_confirmed(form):
        with unit(request) as session:
            taken = backups.request_backup(session, name, by=viewer.principal)
            task_id = taken.backup.task_id
        return see_other(f"/tasks/{task_id}")
    with dry_run(request) as session:
        taken = backups.request_backup(session, name, by=viewer.principal)
        version = taken.backup.app_version
    return confirm_page(
        request,
        viewer,
        title=f'Back up "{name}"?',
        lines=[
            f"The driver's backup hook copies the data of application version {version} into the "
            "backup storage location. The deployment keeps running.",
        ],
        action=f"/deployments/{name}/backups",
        button=f"Back up {name}",
        cancel=f"/deployments/{name}",
    )


def _when_taken(backup: backups.Backup) -> str:
    """The confirmation pages' line saying when, and at which application version, a backup was taken."""
    taken = backup.created_at.strftime("%Y-%m-%d %H:%M UTC")
    return f"Backup {backup.id} was taken at application version {backup.app_version} on {taken}."


@router.post("/deployments/{name}/restore")
def restore(request: Request, name: str, form: Form) -> Response:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
    raw = text(form, "backup_id")
    if not raw.isdigit() or not 1 <= int(raw) < 2**63:
        raise InvalidInput(f'"{raw}" is not a backup id.', field="backup_id")
    backup_id = int(raw)
    if is_confirmed(form):
        with unit(request) as session:
            recorded = backups.request_restore(session, name, backup_id, by=viewer.principal)
            task_id = recorded.task.id if recorded.task else None
        return see_other(f"/tasks/{task_id}")
    with dry_run(request) as session:
        backups.request_restore(session, name, backup_id, by=viewer.principal)
        backup = backups.get_backup(session, backup_id)
        running = changes.read_deployment(session, name)
        now_at = running.running_app_version or running.app_version
        version = backup.app_version
        lines = [_when_taken(backup)]
    if now_at != version:
        lines.append(f"The application goes back from version {now_at} to {version} first.")
    lines.append("Then the driver's restore hook replaces the deployment's data with the backup's.")
    return confirm_page(
        request,
        viewer,
        title=f'Restore backup {backup_id} onto "{name}"?',
        lines=lines,
        action=f"/deployments/{name}/restore",
        hidden={"backup_id": backup_id},
        button=f"Restore backup {backup_id}",
        cancel=f"/deployments/{name}",
        danger=True,
    )


@router.post("/backups/{backup_id}/delete")
def delete_backup(request: Request, backup_id: TaskId, form: Form) -> Response:
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
    if is_confirmed(form):
        with unit(request) as session:
            recorded = backups.request_backup_delete(session, backup_id, by=viewer.principal)
            task_id = recorded.task.id if recorded.task else None
        return see_other(f"/tasks/{task_id}")
    with dry_run(request) as session:
        recorded = backups.request_backup_delete(session, backup_id, by=viewer.principal)
        name = recorded.deployment.name
        backup = backups.get_backup(session, backup_id)
        taken = _when_taken(backup)
        location = backup.location or "the agent's own folder"
    return confirm_page(
        request,
        viewer,
        title=f'Delete backup {backup_id} of "{name}"?',
        lines=[
            taken,
            f"Its files are deleted from {location}; it can no longer be restored.",
        ],
        action=f"/backups/{backup_id}/delete",
        button=f"Delete backup {backup_id}",
        cancel=f"/deployments/{name}",
        danger=True,
    )


@router.post("/deployments/{name}/backup-schedule")
def set_schedule(request: Request, name: str, form: Form) -> Response:
    """Set or remove the deployment's backup schedule from the Backups section."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        check_form(request, form, viewer, Role.READ_WRITE)
        if text(form, "remove") == "yes":
            backup_schedules.remove_schedule(session, name)
        else:
            keep = {}
            for field in ("keep_count", "keep_days"):
                raw = text(form, field).strip()
                if raw and not raw.isdigit():
                    raise InvalidInput(f'"{raw}" is not a whole number.', field=field)
                keep[field] = int(raw) if raw else None
            backup_schedules.set_schedule(
                session, name, cron=text(form, "cron").strip(), by=viewer.principal, **keep
            )
    return see_other(f"/deployments/{name}#backups")


@router.get("/tasks/{task_id}/way-back")
def way_back(request: Request, task_id: TaskId) -> Response:
    """On a failed upgrade's page: restore the backup its pre-hook took, when there is one."""
    with unit(request) as session:
        viewer = viewer_of(request, session)
        found = backups.way_back(session, task_id)
        if found is None or found.backup is None:
            ended = found is None or found.task_ended
            # 286 tells htmx to stop asking: an ended task never gains a way back.
            return Response(status_code=HTMX_STOP_POLLING if ended else 204)
        return render(request, "_way_back.html", viewer, name=found.deployment_name, backup=found.backup)
