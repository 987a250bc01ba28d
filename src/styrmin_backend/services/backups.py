"""Backups and restores of deployments: each a change with its task, and a backup row that records it.

The agent runs the backup hook's actions, then records the files they wrote (name, size, sha256) in
the task's result; when the task ends, :func:`record_backup_end` copies them onto the backup's row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.backup_locations import BackupLocation
from styrmin_backend.domain.backups import (
    BackupFacts,
    BackupFile,
    BackupLabel,
    BackupStatus,
    backup_key,
    check_can_back_up,
    check_can_delete,
    check_can_restore,
)
from styrmin_backend.domain.errors import Conflict, InvalidInput, NotFound
from styrmin_backend.domain.hooks import Hook
from styrmin_backend.domain.tasks import TaskStatus, TaskType
from styrmin_backend.services import backup_locations
from styrmin_backend.services.change_models import (
    RequestedBackup,
    RequestedDeleteBackup,
    RequestedRestore,
    requested_of,
    stored_result,
)
from styrmin_backend.services.changes import (
    Origin,
    Recorded,
    _get_changeable,
    _record_change,
    get_deployment,
    unfinished_started_task,
)
from styrmin_backend.services.deployment_models import Deployment
from styrmin_backend.services.drivers import get_driver_row, stored_spec
from styrmin_backend.services.principal import Principal
from styrmin_backend.services.read_model import ReadModel
from styrmin_backend.store.models import BackupRow, ChangeRow, DriverRow, TaskRow


class Backup(ReadModel):
    """A backup as its record reads: what it was taken of, where its files are, how it ended."""

    id: int
    deployment_name: str
    driver_name: str
    driver_version: str
    app_version: str
    revision: int
    configuration: dict[str, Any]
    location: str
    key: str
    files: list[dict[str, Any]]
    status: str
    label: str
    requested_by: str
    task_id: int | None
    created_at: datetime
    ended_at: datetime | None
    error: str | None


@dataclass(frozen=True)
class RecordedBackup:
    """A requested backup and the change that takes it."""

    backup: Backup
    recorded: Recorded


def driver_hooks(row: DriverRow) -> set[Hook]:
    """The hooks a stored driver version declares actions for."""
    return {action.hook for action in stored_spec(row).spec.actions}


def can_back_up(session: Session, deployment: Deployment) -> bool:
    """Whether the deployment's driver version declares a backup action (the page shows the button)."""
    version = deployment.running_driver_version or deployment.driver_version
    try:
        row = get_driver_row(session, deployment.driver_name, version)
    except NotFound:
        return False
    return Hook.BACKUP in driver_hooks(row)


def request_backup(
    session: Session,
    name: str,
    *,
    by: Principal,
    label: BackupLabel = BackupLabel.MANUAL,
    origin: Origin | None = None,
) -> RecordedBackup:
    """Record a backup of deployment ``name`` at what it runs now; refused when its driver cannot."""
    deployment = _get_changeable(session, name)
    driver_version = deployment.running_driver_version or deployment.driver_version
    app_version = deployment.running_app_version or deployment.app_version
    row = get_driver_row(session, deployment.driver_name, driver_version)
    check_can_back_up(name, f"{row.name}@{row.version}", driver_hooks(row))
    if origin is not None:
        if (unfinished := unfinished_started_task(session, origin, TaskType.BACKUP)) is not None:
            taking = session.scalars(select(BackupRow).where(BackupRow.task_id == unfinished.id)).first()
            if taking is not None:
                return RecordedBackup(Backup.model_validate(taking), Recorded.of(deployment, unfinished))
        parent = session.get(TaskRow, origin.task_id)
        if parent is not None and parent.type == TaskType.UPGRADE.value:
            label = BackupLabel.PRE_UPGRADE
    location = backup_locations.location_in_use(session, deployment.cluster)
    backup = BackupRow(
        deployment_id=deployment.id,
        deployment_name=deployment.name,
        driver_name=deployment.driver_name,
        driver_version=driver_version,
        app_version=app_version,
        revision=0,
        configuration=deployment.configuration,
        location=BackupLocation.from_json(location.location).describe()[:512] if location else "",
        location_id=location.id if location else None,
        key="",
        files=[],
        status=BackupStatus.PENDING.value,
        label=label.value,
        requested_by=by.username,
        created_at=utcnow(),
    )
    session.add(backup)
    session.flush()
    backup.key = backup_key(deployment.name, backup.id)
    requested = RequestedBackup(
        backup_id=backup.id,
        key=backup.key,
        driver_version=driver_version,
        app_version=app_version,
        location=location.location if location else None,
    )
    task = _record_change(session, deployment, requested, by, origin)
    backup.revision = task.revision or 0
    backup.task_id = task.id
    return RecordedBackup(Backup.model_validate(backup), Recorded.of(deployment, task))


def request_restore(
    session: Session, name: str, backup_id: int, *, by: Principal, from_deployment: str | None = None
) -> Recorded:
    """Record a restore of backup ``backup_id`` onto deployment ``name``; refused, changing nothing, when
    the backup cannot bring it back, or is another deployment's and ``from_deployment`` does not name it."""
    deployment = _get_changeable(session, name)
    backup = _backup_row(session, backup_id, field="backup_id")
    facts = backup_facts(backup)
    try:
        row = get_driver_row(session, backup.driver_name, backup.driver_version)
        hooks = driver_hooks(row)
    except NotFound:
        hooks = set()
    check_can_restore(
        facts,
        deployment_name=name,
        driver_name=deployment.driver_name,
        restore_hooks=hooks,
        from_deployment=from_deployment,
    )
    restore = RequestedRestore.model_validate(
        {
            "backup_id": backup.id,
            "key": backup.key,
            "location": backup_locations.location_json(session, backup.location_id),
            "files": backup.files,
            "driver_version": backup.driver_version,
            "app_version": backup.app_version,
            "from_app_version": deployment.running_app_version or deployment.app_version,
            "from_driver_version": deployment.running_driver_version or deployment.driver_version,
            # The restore hook runs with the configuration the backup was taken with, and the version
            # step brings it back (through Helm) when the deployment's has changed since.
            "configuration": backup.configuration,
            "restores_configuration": backup.configuration != deployment.configuration,
        }
    )
    return Recorded.of(deployment, _record_change(session, deployment, restore, by, None))


def request_backup_delete(session: Session, backup_id: int, *, by: Principal) -> Recorded:
    """Record the deletion of backup ``backup_id``: a task of its deployment deletes its files, then
    its row goes. Refused while the backup is being taken or deleted."""
    backup = _backup_row(session, backup_id, field="backup_id", missing=NotFound)
    status = BackupStatus(backup.status)
    check_can_delete(backup.id, status)
    deployment = _get_changeable(session, backup.deployment_name)
    requested = RequestedDeleteBackup(
        backup_id=backup.id,
        key=backup.key,
        location=backup_locations.location_json(session, backup.location_id),
        status_before=status.value,
    )
    # Claimed with a check of its status, so that of two servers pruning at once only one deletes it.
    claimed = session.execute(
        update(BackupRow)
        .where(BackupRow.id == backup.id, BackupRow.status == status.value)
        .values(status=BackupStatus.DELETING.value)
        .execution_options(synchronize_session=False)
    )
    if claimed.rowcount != 1:  # type: ignore[attr-defined]
        raise Conflict(f"Backup {backup.id} is already being deleted.", field="backup_id")
    session.refresh(backup)
    return Recorded.of(deployment, _record_change(session, deployment, requested, by, None))


def list_backups(session: Session, name: str) -> list[Backup]:
    """The backups of deployment ``name``, newest first."""
    deployment = get_deployment(session, name)
    rows = session.scalars(
        select(BackupRow).where(BackupRow.deployment_id == deployment.id).order_by(BackupRow.id.desc())
    )
    return [Backup.model_validate(row) for row in rows]


def list_all_backups(
    session: Session, *, deployment: str | None = None, status: BackupStatus | None = None
) -> list[Backup]:
    """Every backup (of deployments that still exist and deleted ones alike), newest first; only
    ``deployment``'s (which must exist) or those with ``status`` when given."""
    query = select(BackupRow).order_by(BackupRow.id.desc())
    if deployment is not None:
        query = query.where(BackupRow.deployment_id == get_deployment(session, deployment).id)
    if status is not None:
        query = query.where(BackupRow.status == status.value)
    return [Backup.model_validate(row) for row in session.scalars(query)]


def get_backup(session: Session, backup_id: int) -> Backup:
    """Backup ``backup_id``; raises NotFound."""
    return Backup.model_validate(_backup_row(session, backup_id, field="backup_id", missing=NotFound))


def backup_before_upgrade(session: Session, upgrade_task: TaskRow) -> BackupRow | None:
    """The succeeded backup an upgrade task's pre-hook took, if there is one (the way back)."""
    return session.scalars(
        select(BackupRow)
        .join(TaskRow, TaskRow.id == BackupRow.task_id)
        .where(
            TaskRow.parent_task_id == upgrade_task.id,
            BackupRow.status == BackupStatus.SUCCEEDED.value,
        )
        .order_by(BackupRow.id.desc())
    ).first()


@dataclass(frozen=True)
class WayBack:
    """Whether a task offers a way back: the backup to restore, and whether the task has ended."""

    deployment_name: str
    backup: Backup | None
    task_ended: bool


def way_back(session: Session, task_id: int) -> WayBack | None:
    """The way back from task ``task_id``: a failed upgrade's pre-upgrade backup; None without the task."""
    task = session.get(TaskRow, task_id)
    if task is None:
        return None
    backup = None
    if (
        task.type == TaskType.UPGRADE.value
        and TaskStatus(task.status).unsuccessful
        and task.deployment_id is not None
    ):
        row = backup_before_upgrade(session, task)
        backup = Backup.model_validate(row) if row is not None else None
    ended = TaskStatus(task.status).ended
    return WayBack(task.deployment_name, backup, ended)


def backup_facts(row: BackupRow) -> BackupFacts:
    """The domain's view of a backup row."""
    return BackupFacts(
        id=row.id,
        deployment_name=row.deployment_name,
        driver_name=row.driver_name,
        driver_version=row.driver_version,
        app_version=row.app_version,
        status=BackupStatus(row.status),
        files=tuple(BackupFile(str(f["name"]), int(f["size"]), str(f["sha256"])) for f in row.files),
    )


def record_backup_start(session: Session, task: TaskRow) -> None:
    """Mark the backup of a backup task running once the agent claims the task."""
    backup = _backup_of(session, task)
    if backup is not None:
        backup.status = BackupStatus.RUNNING.value


def record_backup_end(session: Session, task: TaskRow) -> None:
    """Copy how a backup task ended (status, location, files, error) onto its backup's row; once a
    backup's deletion succeeded, remove its row (a failed one leaves it as it was, with the error)."""
    if task.type == TaskType.DELETE_BACKUP.value:
        _record_delete_end(session, task)
        return
    backup = _backup_of(session, task)
    if backup is None:
        return
    reported = stored_result(task.result).backup
    if reported is not None:
        backup.location = (reported.location or backup.location)[:512]
    backup.files = [f.model_dump(mode="json") for f in reported.files] if reported else []
    backup.ended_at = task.ended_at or utcnow()
    backup.error = task.error
    succeeded = task.status == TaskStatus.SUCCEEDED.value
    backup.status = (BackupStatus.SUCCEEDED if succeeded else BackupStatus.FAILED).value


def _record_delete_end(session: Session, task: TaskRow) -> None:
    change = session.get(ChangeRow, task.change_id) if task.change_id else None
    deletion = requested_of(change) if change is not None else None
    if not isinstance(deletion, RequestedDeleteBackup):
        return
    backup = session.get(BackupRow, deletion.backup_id)
    if backup is None:
        return
    if task.status == TaskStatus.SUCCEEDED.value:
        session.delete(backup)
    else:
        backup.status = deletion.status_before or BackupStatus.FAILED.value
        backup.error = f"Deleting it failed (task {task.id}): {task.error or 'no error given'}"


def _backup_of(session: Session, task: TaskRow) -> BackupRow | None:
    if task.type != TaskType.BACKUP.value:
        return None
    return session.scalars(select(BackupRow).where(BackupRow.task_id == task.id)).first()


def _backup_row(
    session: Session, backup_id: int, *, field: str, missing: type[InvalidInput | NotFound] = InvalidInput
) -> BackupRow:
    row = session.get(BackupRow, backup_id)
    if row is None:
        raise missing(f"There is no backup {backup_id}.", field=field)
    return row
