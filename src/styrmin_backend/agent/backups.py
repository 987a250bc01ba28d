"""The workflows of a backup, a restore and a backup's deletion.

A backup runs the driver's backup hook (one step per mode that has actions), its actions writing into
the backup's folder, then records (and, for a bucket, uploads) each file the actions wrote with its
size and sha256. A restore checks those files first, brings the application back to the backup's
version and configuration through a linked Helm-only upgrade task when the deployment runs another,
then runs the restore hook of the driver version that took the backup. A deletion removes the
backup's files from the location they were written to.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import styrmin
from styrmin_backend.agent.backup_storage import (
    BackupFolder,
    BackupStorage,
    S3Storage,
    StorageError,
    storage_for,
)
from styrmin_backend.domain.backups import (
    CHECK_FILES_STEP,
    DELETE_FILES_STEP,
    RECORD_FILES_STEP,
    BackupFile,
    restore_version_step,
)
from styrmin_backend.domain.hooks import MODE_ORDER, Hook
from styrmin_backend.protocol import (
    AppliedVersions,
    BackupChange,
    BackupFileRecord,
    BackupRecord,
    DeleteBackupChange,
    DeletedBackup,
    RestoreChange,
)

if TYPE_CHECKING:
    from styrmin_backend.agent.reconciliation import Reconciliation

# These workflows are part of the reconciliation, kept apart: they use its step and hook helpers.

LINKED_TASK_POLL_SECONDS = 0.5
CREDENTIALS_SECRET = "styrmin-backup-location"  # noqa: S105 (a Secret's name)
"""The Secret in a deployment's namespace that gives backup Jobs the bucket's keys (by reference)."""

_BackupChanges = BackupChange | RestoreChange | DeleteBackupChange


async def _storage(
    reconciliation: Reconciliation, change: _BackupChanges, default: BackupFolder
) -> BackupStorage:
    """The storage of the change's location, its bucket's keys read from the cluster's Secret."""
    from styrmin_backend.agent.reconciliation import StepFailed

    try:
        return await storage_for(change.location, default, reconciliation.parts.cluster)
    except StorageError as error:
        raise StepFailed(f"The backup storage location cannot be used: {error}") from None


async def _backup_context(
    reconciliation: Reconciliation, change: BackupChange | RestoreChange, storage: BackupStorage
) -> dict[str, Any]:
    """The GlobalContext fields of the backup and restore hooks; a bucket's keys go into a Secret."""
    context: dict[str, Any] = {
        "backup_id": change.backup_id,
        "backup_folder": str(storage.staging(change.key)),
        "backup_env": storage.job_env(change.key),
    }
    if isinstance(storage, S3Storage):
        await reconciliation.parts.cluster.write_secret(
            reconciliation.namespace,
            CREDENTIALS_SECRET,
            storage.job_credentials(),
            {"app.kubernetes.io/managed-by": "styrmin", "styrmin.io/deployment": reconciliation.name},
        )
        context["backup_env_from"] = CREDENTIALS_SECRET
    return context


async def run_backup(reconciliation: Reconciliation, default: BackupFolder) -> None:
    """The backup hook's modes with the backup's folder ready, then the record (and upload) of its files."""
    from styrmin_backend.agent.reconciliation import StepFailed

    change = reconciliation.claim.change
    assert isinstance(change, BackupChange)
    key = change.key
    storage = await _storage(reconciliation, change, default)
    folder = await asyncio.to_thread(storage.prepare, key)
    reconciliation.extra_context = await _backup_context(reconciliation, change, storage)
    for mode in MODE_ORDER:
        await reconciliation._run_hook_mode(Hook.BACKUP, mode)
    async with reconciliation._step(RECORD_FILES_STEP):
        try:
            files = await asyncio.to_thread(storage.publish, key)
        except StorageError as error:
            raise StepFailed(str(error)) from None
        if not files:
            raise StepFailed(
                f"The backup hook's actions wrote no file into {folder}: there is nothing to restore. "
                "The driver's backup action must write the backup's files there."
            )
        reconciliation._result.backup = BackupRecord(
            location=storage.describe(),
            files=[BackupFileRecord(name=f.name, size=f.size, sha256=f.sha256) for f in files],
        )


async def run_restore(reconciliation: Reconciliation, default: BackupFolder) -> None:
    """Check the files, bring the version back (linked upgrade task), then the restore hook's modes."""
    from styrmin_backend.agent.reconciliation import StepFailed

    change = reconciliation.claim.change
    assert isinstance(change, RestoreChange)
    key = change.key
    # The server resolved the restore's target to the backup's versions and configuration.
    app_version, driver_version = change.target.app_version, change.target.driver_version
    recorded = [BackupFile(f.name, f.size, f.sha256) for f in change.files]
    storage = await _storage(reconciliation, change, default)
    async with reconciliation._step(CHECK_FILES_STEP):
        try:
            problems = await asyncio.to_thread(storage.fetch, key, recorded)
        except StorageError as error:
            raise StepFailed(f"Backup {change.backup_id} cannot be restored: {error}") from None
        if problems:
            await asyncio.to_thread(storage.finish_restore, key)
            raise StepFailed(
                f"Backup {change.backup_id} cannot be restored: in {storage.where(key)}, "
                f"{'; '.join(problems)}. Nothing was changed; choose another backup."
            )
    running = (change.from_app_version, change.from_driver_version)
    if running != (app_version, driver_version) or change.restores_configuration:
        async with reconciliation._step(restore_version_step(app_version)) as step_id:
            await _upgrade_linked(reconciliation, step_id, app_version, driver_version)
    reconciliation.extra_context = await _backup_context(reconciliation, change, storage)
    try:
        for mode in MODE_ORDER:
            await reconciliation._run_hook_mode(Hook.RESTORE, mode)
    finally:
        await asyncio.to_thread(storage.finish_restore, key)
    reconciliation._result.applied = AppliedVersions(app_version=app_version, driver_version=driver_version)


async def _upgrade_linked(
    reconciliation: Reconciliation, step_id: int, app_version: str, driver_version: str
) -> None:
    """Request the Helm-only upgrade to the backup's version, linked to ``step_id``, and wait for it."""
    from styrmin_backend.agent.reconciliation import StepFailed

    claim = reconciliation.claim
    async with styrmin.AsyncClient(url=claim.styrmin_url, token=claim.actions_token) as client:
        change = await client.deployments.upgrade(
            reconciliation.name,
            app_version=app_version,
            driver_version=driver_version,
            started_by_step=step_id,
        )
        if change.task is None:
            return
        task = await client.tasks.wait(change.task.id, interval=LINKED_TASK_POLL_SECONDS)
    if task.status == styrmin.TaskStatus.FAILED:
        raise StepFailed(
            f"Task {task.id} (upgrade to application version {app_version}, driver {driver_version}) "
            f"failed: {task.error or 'no error given'}"
        )


async def run_backup_delete(reconciliation: Reconciliation, default: BackupFolder) -> None:
    """Delete a backup's files from the storage location it was written to."""
    from styrmin_backend.agent.reconciliation import StepFailed

    change = reconciliation.claim.change
    assert isinstance(change, DeleteBackupChange)
    async with reconciliation._step(DELETE_FILES_STEP):
        storage = await _storage(reconciliation, change, default)
        try:
            await asyncio.to_thread(storage.delete, change.key)
        except StorageError as error:
            raise StepFailed(str(error)) from None
        reconciliation._result.deleted = DeletedBackup(location=storage.describe(), key=change.key)
