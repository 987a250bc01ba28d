"""Backups and restores: what a backup records, when one may be taken, and when a restore is refused.

A backup is taken by the driver's backup hook and restored by the restore hook of the driver version
that took it; both are changes of the deployment, recorded as tasks like any other. Restoring brings
the application version back first, so data and version return together.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum

from styrmin_backend.domain.errors import Conflict, InvalidInput
from styrmin_backend.domain.hooks import Hook

BACKUP_DIR_ENV = "STYRMIN_BACKUP_DIR"
"""The env var that gives a backup or restore Job the folder of the backup's files."""

CHECK_FILES_STEP = "Check the backup's files"
"""The restore's first step: every file the backup recorded is there, with its size and sha256."""

RECORD_FILES_STEP = "Record the backup's files"
"""The backup's last step: the name, size and sha256 of each file its actions wrote."""

DELETE_FILES_STEP = "Delete the backup's files"
"""The one step of a backup's deletion: its files go from the storage location."""


def restore_version_step(app_version: str) -> str:
    """The restore step that brings the chart back to the backup's application version.

    >>> restore_version_step("1.0.0")
    'Bring the application back to version 1.0.0'
    """
    return f"Bring the application back to version {app_version}"


class BackupStatus(StrEnum):
    """Where a backup is in its life; it follows the status of its task."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DELETING = "deleting"


class BackupLabel(StrEnum):
    """Why a backup was taken."""

    MANUAL = "manual"
    SCHEDULED = "scheduled"
    PRE_UPGRADE = "pre-upgrade"


@dataclass(frozen=True)
class BackupFile:
    """One file of a backup, as the agent found it once the backup hook ended."""

    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class BackupFacts:
    """What a restore needs to know about a backup to accept it."""

    id: int
    deployment_name: str
    driver_name: str
    driver_version: str
    app_version: str
    status: BackupStatus
    files: tuple[BackupFile, ...]


_FILE_NAME = re.compile(r"^[A-Za-z0-9._-][A-Za-z0-9._/-]{0,254}$")


def check_file_name(name: str) -> str:
    """A backup file's name relative to its folder: no absolute path, no ``..``; raises ValueError."""
    if not _FILE_NAME.match(name) or name.startswith("/") or ".." in name.split("/"):
        raise ValueError(f'"{name}" is not a file name inside the backup\'s folder.')
    return name


def backup_key(deployment_name: str, backup_id: int) -> str:
    """Where a backup's files live inside the storage location.

    >>> backup_key("shop", 7)
    'shop/backup-7'
    """
    return f"{deployment_name}/backup-{backup_id}"


def check_can_back_up(deployment_name: str, driver: str, hooks: Iterable[Hook]) -> None:
    """Refuse a backup of a deployment whose driver declares no backup action."""
    if Hook.BACKUP not in set(hooks):
        raise Conflict(
            f'Deployment "{deployment_name}" cannot be backed up: its driver {driver} declares no action '
            "for the backup hook. A driver author adds one (hook: backup) to make its deployments "
            "backed up.",
            field="name",
        )


def check_can_restore(
    backup: BackupFacts,
    *,
    deployment_name: str,
    driver_name: str,
    restore_hooks: Iterable[Hook],
    from_deployment: str | None = None,
) -> None:
    """Refuse a restore that cannot bring the deployment back; the message names the problem.

    Refused: a backup of another driver, a backup of another deployment unless ``from_deployment``
    names it (it replaces the deployment's data, configuration and secrets with another's: one
    mistyped id must not do that), one that did not succeed, one without files, or one whose driver
    version declares no restore action. Missing files in the storage location are checked by the agent
    before anything changes.
    """
    if backup.driver_name != driver_name:
        raise Conflict(
            f"Backup {backup.id} was taken by driver {backup.driver_name}, and deployment "
            f'"{deployment_name}" runs driver {driver_name}: a backup is restored only by its own driver.',
            field="backup_id",
        )
    if backup.deployment_name != deployment_name and from_deployment != backup.deployment_name:
        raise Conflict(
            f'Backup {backup.id} is a backup of deployment "{backup.deployment_name}", not of '
            f'"{deployment_name}": restoring it would replace the data, configuration and secrets of '
            f'"{deployment_name}" with those of "{backup.deployment_name}". If that is what you want, '
            f'name where it comes from: from_deployment "{backup.deployment_name}" '
            f"(styrminctl: --from-deployment {backup.deployment_name}).",
            field="backup_id",
        )
    if backup.status is not BackupStatus.SUCCEEDED:
        raise Conflict(
            f"Backup {backup.id} is {backup.status.value}, not succeeded: only a complete backup can be "
            "restored. Choose another backup.",
            field="backup_id",
        )
    if not backup.files:
        raise Conflict(
            f"Backup {backup.id} recorded no files: there is nothing to restore. Choose another backup.",
            field="backup_id",
        )
    if Hook.RESTORE not in set(restore_hooks):
        raise Conflict(
            f"Backup {backup.id} was taken by driver {backup.driver_name}@{backup.driver_version}, which "
            "declares no action for the restore hook, so Styrmin cannot restore it.",
            field="backup_id",
        )


def missing_files(recorded: Iterable[BackupFile], found: Iterable[BackupFile]) -> list[str]:
    """What is wrong with the files found in the storage location, one line per file; empty if nothing.

    >>> missing_files([BackupFile("db", 3, "ab")], [])
    ['db is missing']
    """
    by_name = {f.name: f for f in found}
    problems = []
    for wanted in recorded:
        there = by_name.get(wanted.name)
        if there is None:
            problems.append(f"{wanted.name} is missing")
        elif there.size != wanted.size:
            problems.append(f"{wanted.name} has {there.size} bytes, the backup recorded {wanted.size}")
        elif there.sha256 != wanted.sha256:
            problems.append(f"{wanted.name} has another sha256 than the backup recorded")
    return problems


def check_can_delete(backup_id: int, status: BackupStatus) -> None:
    """Refuse to delete a backup that is still being taken, or already being deleted."""
    if status in (BackupStatus.PENDING, BackupStatus.RUNNING):
        raise Conflict(
            f"Backup {backup_id} is still being taken ({status.value}); wait for its task to end, then delete it.",
            field="backup_id",
        )
    if status is BackupStatus.DELETING:
        raise Conflict(f"Backup {backup_id} is already being deleted.", field="backup_id")


MAX_KEEP_COUNT = 1000
MAX_KEEP_DAYS = 3650


def check_schedule(cron: str, keep_count: int | None, keep_days: int | None) -> None:
    """Refuse a schedule whose cron expression or retention is not valid, naming the field."""
    from cronsim import CronSim, CronSimError

    if not cron or len(cron) > 100:
        raise InvalidInput(
            "Give a cron expression of five fields, e.g. 0 3 * * * (at 03:00 UTC).", field="cron"
        )
    try:
        CronSim(cron, datetime.now(UTC))
    except CronSimError as error:
        raise InvalidInput(
            f'"{cron}" is not a cron expression ({error}); give five fields, e.g. 0 3 * * * (at 03:00 UTC).',
            field="cron",
        ) from None
    if keep_count is not None and not 1 <= keep_count <= MAX_KEEP_COUNT:
        raise InvalidInput(f"keep_count is a number from 1 to {MAX_KEEP_COUNT}.", field="keep_count")
    if keep_days is not None and not 1 <= keep_days <= MAX_KEEP_DAYS:
        raise InvalidInput(f"keep_days is a number of days from 1 to {MAX_KEEP_DAYS}.", field="keep_days")


def next_run(cron: str, after: datetime) -> datetime:
    """When a schedule next starts a backup, strictly after ``after`` (cron in UTC).

    >>> from datetime import UTC, datetime
    >>> next_run("0 3 * * *", datetime(2026, 1, 1, 3, 0, tzinfo=UTC)).isoformat()
    '2026-01-02T03:00:00+00:00'
    """
    from cronsim import CronSim

    return next(CronSim(cron, after.astimezone(UTC)))


@dataclass(frozen=True)
class KeptBackup:
    """What retention looks at in a backup."""

    id: int
    label: BackupLabel
    status: BackupStatus
    created_at: datetime


def backups_to_prune(
    backups: Iterable[KeptBackup], *, keep_count: int | None, keep_days: int | None, now: datetime
) -> list[int]:
    """The scheduled backups retention deletes: beyond the newest ``keep_count`` ended ones, or older
    than ``keep_days``. Manual and pre-upgrade backups are never pruned; neither is one not ended.

    >>> from datetime import UTC, datetime, timedelta
    >>> now = datetime(2026, 1, 10, tzinfo=UTC)
    >>> b = [KeptBackup(i, BackupLabel.SCHEDULED, BackupStatus.SUCCEEDED, now - timedelta(days=i)) for i in (1, 2, 3)]
    >>> backups_to_prune(b, keep_count=2, keep_days=None, now=now)
    [3]
    """
    ended = sorted(
        (
            b
            for b in backups
            if b.label is BackupLabel.SCHEDULED and b.status in (BackupStatus.SUCCEEDED, BackupStatus.FAILED)
        ),
        key=lambda b: (b.created_at, b.id),
        reverse=True,
    )
    pruned: list[int] = []
    for position, backup in enumerate(ended):
        too_many = keep_count is not None and position >= keep_count
        too_old = keep_days is not None and backup.created_at < now - timedelta(days=keep_days)
        if too_many or too_old:
            pruned.append(backup.id)
    return sorted(pruned)
