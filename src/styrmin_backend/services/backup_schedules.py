"""Backup schedules: each deployment's cron expression and retention, and the server's tick that starts
due backups and prunes old scheduled ones.

Several servers may share one database: a due schedule is claimed by moving its ``next_run_at``
forward with an UPDATE that also checks its old value, so exactly one server's UPDATE applies and only
that server starts the backup. Pruning deletes through delete-backup tasks, whose request claims the
backup the same way (see ``backups.request_backup_delete``).
"""

from __future__ import annotations

import logging
from datetime import datetime

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from styrmin_backend.clock import as_utc, utcnow
from styrmin_backend.domain.backups import (
    BackupLabel,
    BackupStatus,
    KeptBackup,
    backups_to_prune,
    check_schedule,
    next_run,
)
from styrmin_backend.domain.errors import DomainError, NotFound
from styrmin_backend.domain.roles import Role
from styrmin_backend.domain.status import DeploymentStatus
from styrmin_backend.services import backups
from styrmin_backend.services.changes import get_deployment
from styrmin_backend.services.principal import Principal
from styrmin_backend.services.read_model import ReadModel
from styrmin_backend.store.db import hold_the_write_lock
from styrmin_backend.store.models import BackupRow, BackupScheduleRow, DeploymentRow

log = logging.getLogger("styrmin.schedules")

MAX_ERROR = 2000


class BackupSchedule(ReadModel):
    """A deployment's backup schedule as set, and how its last due backup went."""

    cron: str
    keep_count: int | None
    keep_days: int | None
    next_run_at: datetime
    last_started_at: datetime | None
    last_error: str | None
    updated_by: str
    updated_at: datetime


def set_schedule(
    session: Session, name: str, *, cron: str, keep_count: int | None, keep_days: int | None, by: Principal
) -> BackupSchedule:
    """Set (or replace) deployment ``name``'s backup schedule; the next backup is at the cron's next time."""
    check_schedule(cron, keep_count, keep_days)
    deployment = get_deployment(session, name)
    now = utcnow()
    row = _schedule_of(session, deployment.id)
    if row is None:
        row = BackupScheduleRow(deployment_id=deployment.id)
        session.add(row)
    row.cron, row.keep_count, row.keep_days = cron, keep_count, keep_days
    row.next_run_at = next_run(cron, now)
    row.last_error = None
    row.updated_by, row.updated_at = by.username, now
    session.flush()
    return BackupSchedule.model_validate(row)


def get_schedule(session: Session, name: str) -> BackupSchedule | None:
    """Deployment ``name``'s backup schedule, or None."""
    row = _schedule_of(session, get_deployment(session, name).id)
    return BackupSchedule.model_validate(row) if row is not None else None


def remove_schedule(session: Session, name: str) -> None:
    """Stop taking scheduled backups of ``name`` (its backups stay); raises NotFound when there is none."""
    row = _schedule_of(session, get_deployment(session, name).id)
    if row is None:
        raise NotFound(f'Deployment "{name}" has no backup schedule.', field="name")
    session.delete(row)


def _schedule_of(session: Session, deployment_id: int) -> BackupScheduleRow | None:
    return session.scalars(
        select(BackupScheduleRow).where(BackupScheduleRow.deployment_id == deployment_id)
    ).one_or_none()


def _scheduler(schedule: BackupScheduleRow) -> Principal:
    """The schedule's backups and prunes are requested in the name of who set it."""
    return Principal(
        user_id=0,
        username=schedule.updated_by,
        role=Role.READ_WRITE,
        is_builtin=False,
        token_id=0,
        token_kind="schedule",  # noqa: S106 (a kind of caller, not a secret)
    )


def claim_due(session: Session, schedule_id: int, due_at: datetime, cron: str, now: datetime) -> bool:
    """Move a due schedule's next run past ``now``, only if no other server did: True when this one did."""
    moved = session.execute(
        update(BackupScheduleRow)
        .where(BackupScheduleRow.id == schedule_id, BackupScheduleRow.next_run_at == due_at)
        .values(next_run_at=next_run(cron, now), last_started_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(moved.rowcount == 1)  # type: ignore[attr-defined]


def due_schedules(session: Session, now: datetime) -> list[tuple[int, datetime, str]]:
    """The schedules whose next run has come: id, that time, cron."""
    rows = session.execute(
        select(BackupScheduleRow.id, BackupScheduleRow.next_run_at, BackupScheduleRow.cron).where(
            BackupScheduleRow.next_run_at <= now
        )
    ).all()
    return [(row[0], row[1], row[2]) for row in rows]


def start_due_backup(
    session: Session, schedule_id: int, due_at: datetime, cron: str, now: datetime
) -> int | None:
    """Start the due backup of one schedule if this server claims it; the backup's id, or None."""
    if not claim_due(session, schedule_id, due_at, cron, now):
        return None
    schedule = session.get(BackupScheduleRow, schedule_id)
    if schedule is None:
        return None
    deployment = session.get(DeploymentRow, schedule.deployment_id)
    if deployment is None or deployment.status in (DeploymentStatus.DELETING, DeploymentStatus.DELETED):
        return None
    by = _scheduler(schedule)
    hold_the_write_lock(session)  # the savepoint's reads, then its writes, on one snapshot
    try:
        with session.begin_nested():
            taken = backups.request_backup(session, deployment.name, by=by, label=BackupLabel.SCHEDULED)
    except DomainError as error:
        schedule.last_error = (
            f"The backup due at {as_utc(due_at):%Y-%m-%d %H:%M} UTC was not started: {error.message}"[
                :MAX_ERROR
            ]
        )
        return None
    schedule.last_error = None
    return taken.backup.id


def prune(session: Session, deployment_id: int, now: datetime) -> list[int]:
    """Request the deletion of the scheduled backups the deployment's retention no longer keeps."""
    schedule = _schedule_of(session, deployment_id)
    if schedule is None or (schedule.keep_count is None and schedule.keep_days is None):
        return []
    rows = session.scalars(select(BackupRow).where(BackupRow.deployment_id == deployment_id)).all()
    kept = [
        KeptBackup(r.id, BackupLabel(r.label), BackupStatus(r.status), as_utc(r.created_at)) for r in rows
    ]
    by = _scheduler(schedule)
    requested = []
    pruned = backups_to_prune(kept, keep_count=schedule.keep_count, keep_days=schedule.keep_days, now=now)
    if pruned:
        hold_the_write_lock(session)  # each savepoint's reads, then its writes, on one snapshot
    for backup_id in pruned:
        try:
            with session.begin_nested():
                backups.request_backup_delete(session, backup_id, by=by)
            requested.append(backup_id)
        except DomainError as error:  # e.g. another server claimed it first
            log.info("Backup %s is not pruned now: %s", backup_id, error.message)
    return requested


def run_schedules(session: Session, now: datetime | None = None) -> tuple[list[int], list[int]]:
    """One tick: start every due backup this server claims, then prune. The started and pruned ids."""
    now = now or utcnow()
    started = []
    for schedule_id, due_at, cron in due_schedules(session, now):
        backup_id = start_due_backup(session, schedule_id, due_at, cron, now)
        if backup_id is not None:
            started.append(backup_id)
    pruned = []
    for deployment_id in session.scalars(select(BackupScheduleRow.deployment_id)).all():
        pruned += prune(session, deployment_id, now)
    return started, pruned
