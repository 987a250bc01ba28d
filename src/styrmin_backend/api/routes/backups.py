"""Backups of deployments: take one, list and read them, restore one (the way back)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import Path, Query, Request, Response
from pydantic import BaseModel, Field, StrictInt

from styrmin_backend.api.deps import Db, Reader, Writer, api_router
from styrmin_backend.api.pages import Cursor, Limit, page_of
from styrmin_backend.api.schemas import MAX_ID, Answer, ChangeOut, DeploymentOut, Strict, TaskSummary
from styrmin_backend.domain.backups import BackupLabel, BackupStatus
from styrmin_backend.domain.errors import NotFound
from styrmin_backend.services import backup_schedules, backups, changes
from styrmin_backend.services.backup_schedules import BackupSchedule

router = api_router(tags=["backups"])
DeploymentName = Annotated[str, Path(max_length=53)]
BackupId = Annotated[int, Path(ge=1, le=MAX_ID)]


class BackupFileOut(Answer):
    name: str = Field(description="Path of the file inside the backup's folder.")
    size: int = Field(description="Size in bytes.")
    sha256: str = Field(description="SHA-256 of the content, hex.")


class BackupOut(Answer):
    id: int
    deployment: str = Field(validation_alias="deployment_name")
    driver: str = Field(validation_alias="driver_name")
    driver_version: str = Field(description="The driver version whose backup hook took it (and restores it).")
    app_version: str = Field(description="The application version the deployment ran when it was taken.")
    revision: int = Field(description="Revision of the backup's change.")
    configuration: dict[str, Any] = Field(description="The deployment's configuration when it was taken.")
    location: str = Field(description="The storage location, as the agent names it (no credentials).")
    key: str = Field(description="The folder of the backup's files inside the location.")
    files: list[BackupFileOut]
    status: BackupStatus
    label: BackupLabel
    requested_by: str
    task_id: int | None
    created_at: datetime
    ended_at: datetime | None
    error: str | None


class BackupRequest(Strict):
    started_by_step: StrictInt | None = Field(
        default=None, ge=1, le=MAX_ID, description="Set by Styrmin's actions only (create_backup)."
    )


class BackupChangeOut(BaseModel):
    backup: BackupOut
    deployment: DeploymentOut
    task: TaskSummary


class RestoreRequest(Strict):
    backup_id: StrictInt = Field(ge=1, le=MAX_ID, description="The backup to restore.")
    from_deployment: str | None = Field(
        default=None,
        max_length=53,
        description="For a backup of another deployment: that deployment's name, to say that its data, "
        "configuration and secrets are to replace this one's (refused without it).",
    )


@router.get("/deployments/{name}/backups", response_model=list[BackupOut])
def list_backups(
    name: DeploymentName,
    db: Db,
    _: Reader,
    request: Request,
    response: Response,
    limit: Limit = 500,
    cursor: Cursor = None,
) -> list[BackupOut]:
    """The backups of a deployment, newest first."""
    found = [BackupOut.model_validate(row) for row in backups.list_backups(db, name)]
    return page_of(found, lambda b: str(b.id), limit=limit, cursor=cursor, request=request, response=response)


@router.get("/backups", response_model=list[BackupOut])
def list_all_backups(
    db: Db,
    _: Reader,
    request: Request,
    response: Response,
    deployment: Annotated[str | None, Query(max_length=53, description="Only this deployment's.")] = None,
    status: Annotated[BackupStatus | None, Query(description="Only backups with this status.")] = None,
    limit: Limit = 500,
    cursor: Cursor = None,
) -> list[BackupOut]:
    """Every backup anyone signed in may read (every role reads every backup), newest first."""
    found = [
        BackupOut.model_validate(row)
        for row in backups.list_all_backups(db, deployment=deployment, status=status)
    ]
    return page_of(found, lambda b: str(b.id), limit=limit, cursor=cursor, request=request, response=response)


@router.post("/deployments/{name}/backups", response_model=BackupChangeOut, status_code=202)
def create_backup(name: DeploymentName, body: BackupRequest, db: Db, principal: Writer) -> BackupChangeOut:
    """Back up a deployment: its driver's backup hook runs as a task. Refused when the driver has no
    backup action."""
    origin = changes.origin_of(db, principal, body.started_by_step)
    taken = backups.request_backup(db, name, by=principal, origin=origin)
    assert taken.recorded.task is not None
    return BackupChangeOut(
        backup=BackupOut.model_validate(taken.backup),
        deployment=DeploymentOut.of(taken.recorded.deployment),
        task=TaskSummary.model_validate(taken.recorded.task),
    )


@router.get("/backups/{backup_id}", response_model=BackupOut)
def get_backup(backup_id: BackupId, db: Db, _: Reader) -> BackupOut:
    """One backup with its files."""
    return BackupOut.model_validate(backups.get_backup(db, backup_id))


@router.delete("/backups/{backup_id}", response_model=ChangeOut, status_code=202)
def delete_backup(backup_id: BackupId, db: Db, principal: Writer) -> ChangeOut:
    """Delete a backup: a task of its deployment deletes its files from the storage location, then the
    backup is gone. Refused (409) while it is being taken or deleted."""
    recorded = backups.request_backup_delete(db, backup_id, by=principal)
    return ChangeOut(
        deployment=DeploymentOut.of(recorded.deployment),
        task=TaskSummary.model_validate(recorded.task) if recorded.task else None,
    )


@router.post("/deployments/{name}/restore", response_model=ChangeOut, status_code=202)
def restore_backup(name: DeploymentName, body: RestoreRequest, db: Db, principal: Writer) -> ChangeOut:
    """Restore a backup: the application goes back to the backup's version, then the driver's restore
    hook brings the data back. Refused, changing nothing, for a backup that cannot be restored."""
    recorded = backups.request_restore(
        db, name, body.backup_id, by=principal, from_deployment=body.from_deployment
    )
    return ChangeOut(
        deployment=DeploymentOut.of(recorded.deployment),
        task=TaskSummary.model_validate(recorded.task) if recorded.task else None,
    )


class BackupScheduleOut(Answer):
    deployment: str
    cron: str = Field(description="Five-field cron expression, in UTC.")
    keep_count: int | None = Field(description="Scheduled backups kept, newest first; null: no limit.")
    keep_days: int | None = Field(description="Scheduled backups older than this many days are deleted.")
    next_run_at: datetime
    last_started_at: datetime | None
    last_error: str | None = Field(description="Why the last due backup was not started, if it was not.")
    updated_by: str
    updated_at: datetime


class BackupScheduleRequest(Strict):
    cron: str = Field(max_length=100, description="When to back up, e.g. 0 3 * * * (03:00 UTC daily).")
    keep_count: StrictInt | None = Field(default=None, description="Keep this many scheduled backups.")
    keep_days: StrictInt | None = Field(default=None, description="Delete scheduled backups older than this.")


def _schedule_out(name: str, schedule: BackupSchedule) -> BackupScheduleOut:
    return BackupScheduleOut.model_validate({**dict(schedule), "deployment": name})


@router.get("/deployments/{name}/backup-schedule", response_model=BackupScheduleOut)
def get_backup_schedule(name: DeploymentName, db: Db, _: Reader) -> BackupScheduleOut:
    """The deployment's backup schedule; 404 when it has none."""
    row = backup_schedules.get_schedule(db, name)
    if row is None:
        raise NotFound(f'Deployment "{name}" has no backup schedule.', field="name")
    return _schedule_out(name, row)


@router.put("/deployments/{name}/backup-schedule", response_model=BackupScheduleOut)
def set_backup_schedule(
    name: DeploymentName, body: BackupScheduleRequest, db: Db, principal: Writer
) -> BackupScheduleOut:
    """Take backups of the deployment on a cron schedule (UTC), keeping a count or an age of them."""
    row = backup_schedules.set_schedule(
        db, name, cron=body.cron, keep_count=body.keep_count, keep_days=body.keep_days, by=principal
    )
    return _schedule_out(name, row)


@router.delete("/deployments/{name}/backup-schedule", status_code=204)
def remove_backup_schedule(name: DeploymentName, db: Db, _: Writer) -> Response:
    """Stop taking scheduled backups (the backups taken stay)."""
    backup_schedules.remove_schedule(db, name)
    return Response(status_code=204)
