"""A deployment's revisions: what each change asked the deployment to be, read from its change rows.

Each revision carries the driver version, application version and configuration the deployment was
asked to have once that change was recorded: a create or an upgrade says them; a restore brings the
backup's back; every other change (configure, stop, start, backup) keeps the versions in force and a
configure sets a new configuration. Rollback (``services.rollback``) requests a revision's state again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from styrmin_backend.domain.backups import BackupStatus
from styrmin_backend.domain.errors import NotFound
from styrmin_backend.domain.tasks import TaskStatus, TaskType
from styrmin_backend.services.changes import get_deployment
from styrmin_backend.store.models import BackupRow, ChangeRow, DeploymentRow, TaskRow

APPLYING_TYPES = frozenset(
    {TaskType.CREATE, TaskType.UPGRADE, TaskType.CONFIGURE, TaskType.RESTORE, TaskType.STOP, TaskType.START}
)
"""The changes whose task applies the deployment's chart: a preview compares with the last that succeeded."""


@dataclass(frozen=True)
class Revision:
    """One revision of a deployment: the change that made it, who asked and how its task went, and
    the state it asked for. ``configuration`` holds secrets: interfaces conceal it."""

    revision: int
    type: TaskType
    driver_name: str
    driver_version: str
    app_version: str
    configuration: dict[str, Any]
    requested_by: str
    requested_at: datetime
    task_id: int | None
    task_status: TaskStatus | None
    task_error: str | None


def _state_after(
    task_type: TaskType, spec: dict[str, Any], state: tuple[str, str, dict[str, Any]]
) -> tuple[str, str, dict[str, Any]]:
    """The (driver version, app version, configuration) a change of ``task_type`` asks for, from the
    ``state`` the revision before asked for."""
    driver_version, app_version, configuration = state
    if task_type is TaskType.CREATE:
        return str(spec["driver_version"]), str(spec["app_version"]), dict(spec.get("configuration") or {})
    if task_type is TaskType.UPGRADE:
        return (
            str(spec.get("to_driver_version") or driver_version),
            str(spec.get("to_app_version") or app_version),
            dict(spec.get("configuration") or configuration),
        )
    if task_type is TaskType.RESTORE:
        return (
            str(spec.get("driver_version") or driver_version),
            str(spec.get("app_version") or app_version),
            dict(spec.get("configuration") or configuration),
        )
    if task_type is TaskType.CONFIGURE:
        return driver_version, app_version, dict(spec.get("configuration") or configuration)
    return state


def revisions_of(session: Session, deployment: DeploymentRow) -> list[Revision]:
    """Every revision of ``deployment``, oldest first.

    An upgrade an action started (``upgrade_deployment_version``) is a revision of its own, like any
    change; its configuration is the one in force.
    """
    rows = session.execute(
        select(ChangeRow, TaskRow)
        .outerjoin(TaskRow, TaskRow.change_id == ChangeRow.id)
        .where(ChangeRow.deployment_id == deployment.id)
        .order_by(ChangeRow.revision)
    ).all()
    state = (deployment.driver_version, deployment.app_version, dict(deployment.configuration))
    revisions: list[Revision] = []
    for change, task in rows:
        task_type = TaskType(change.type)
        state = _state_after(task_type, dict(change.spec), state)
        revisions.append(
            Revision(
                revision=change.revision,
                type=task_type,
                driver_name=deployment.driver_name,
                driver_version=state[0],
                app_version=state[1],
                configuration=state[2],
                requested_by=change.requested_by,
                requested_at=change.created_at,
                task_id=task.id if task is not None else None,
                task_status=TaskStatus(task.status) if task is not None else None,
                task_error=task.error if task is not None else None,
            )
        )
    return revisions


def deployment_history(session: Session, name: str) -> list[Revision]:
    """The revisions of deployment ``name``, newest first; raises NotFound."""
    return list(reversed(revisions_of(session, get_deployment(session, name))))


def get_revision(session: Session, name: str, revision: int) -> Revision:
    """Revision ``revision`` of deployment ``name``; raises NotFound naming the revisions there are."""
    history = revisions_of(session, get_deployment(session, name))
    for entry in history:
        if entry.revision == revision:
            return entry
    known = f"revisions 1 to {history[-1].revision}" if history else "no revisions yet"
    raise NotFound(
        f'Deployment "{name}" has no revision {revision}; it has {known} '
        f"(see: styrminctl deployments history {name}).",
        field="revision",
    )


def last_applied(session: Session, deployment: DeploymentRow) -> Revision | None:
    """The latest revision whose task applied the chart and succeeded: what the cluster runs."""
    for entry in reversed(revisions_of(session, deployment)):
        if entry.type in APPLYING_TYPES and entry.task_status is TaskStatus.SUCCEEDED:
            return entry
    return None


@dataclass(frozen=True)
class BackupBefore:
    """A succeeded backup taken while the deployment ran a revision's versions: the way back when a
    driver refuses to go back to them."""

    backup_id: int
    revision: int
    app_version: str
    driver_version: str


def backup_at_versions(session: Session, deployment: DeploymentRow, target: Revision) -> BackupBefore | None:
    """The newest succeeded backup of ``deployment`` taken at ``target``'s versions, after it."""
    row = session.scalars(
        select(BackupRow)
        .where(
            BackupRow.deployment_id == deployment.id,
            BackupRow.status == BackupStatus.SUCCEEDED.value,
            BackupRow.app_version == target.app_version,
            BackupRow.driver_version == target.driver_version,
            BackupRow.revision >= target.revision,
        )
        .order_by(BackupRow.id.desc())
        .limit(1)
    ).first()
    if row is None:
        return None
    return BackupBefore(
        backup_id=row.id,
        revision=row.revision,
        app_version=row.app_version,
        driver_version=row.driver_version,
    )
