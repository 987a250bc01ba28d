"""The operations of a backup, a restore and a backup's deletion, over the agent's ports.

A backup runs the driver's backup hook (one step per mode that has actions), its actions writing into
the backup's folder, then records (and, for a bucket, uploads) each file the actions wrote with its
size and sha256. A restore checks those files first, brings the application back to the backup's
version and configuration through a linked Helm-only upgrade task when the deployment runs another,
then runs the restore hook of the driver version that took the backup. A deletion removes the
backup's files from the location they were written to.

Which of these run, and in what order, is the plan's (``domain.plan``); the executor
(``reconciliation``) records each as a step and calls the operation here.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from styrmin_backend.agent.backup_storage import BackupStorage, StorageError
from styrmin_backend.agent.failures import StepFailed
from styrmin_backend.agent.ports import BackupLocations, Cluster, LinkedChanges
from styrmin_backend.domain.backups import BackupFile
from styrmin_backend.protocol import (
    BackupChange,
    BackupFileRecord,
    BackupRecord,
    DeleteBackupChange,
    DeletedBackup,
    RestoreChange,
)

CREDENTIALS_SECRET = "styrmin-backup-location"  # noqa: S105 (a Secret's name)
"""The Secret in a deployment's namespace that gives backup Jobs the bucket's keys (by reference)."""
NO_BACKUP_STORAGE_ERROR = "This agent has no backup storage location; set STYRMIN_AGENT_BACKUP_DIR."

BackupChanges = BackupChange | RestoreChange | DeleteBackupChange


async def open_storage(locations: BackupLocations | None, change: BackupChanges) -> BackupStorage:
    """The storage of the change's location, its bucket's keys read from the cluster's Secret."""
    if locations is None:
        raise StepFailed(NO_BACKUP_STORAGE_ERROR)
    try:
        return await locations.open(change.location)
    except StorageError as error:
        raise StepFailed(f"The backup storage location cannot be used: {error}") from None


async def hook_context(
    cluster: Cluster,
    locations: BackupLocations,
    deployment: str,
    namespace: str,
    change: BackupChange | RestoreChange,
    storage: BackupStorage,
) -> dict[str, Any]:
    """The GlobalContext fields of the backup and restore hooks; a bucket's keys go into a Secret."""
    context: dict[str, Any] = {
        "backup_id": change.backup_id,
        "backup_folder": str(storage.staging(change.key)),
        "backup_env": storage.job_env(change.key),
    }
    secret = locations.job_secret(storage)
    if secret is not None:
        await cluster.write_secret(
            namespace,
            CREDENTIALS_SECRET,
            secret,
            {"app.kubernetes.io/managed-by": "styrmin", "styrmin.io/deployment": deployment},
        )
        context["backup_env_from"] = CREDENTIALS_SECRET
    return context


async def prepare_folder(storage: BackupStorage, key: str) -> Path:
    """Make the backup's folder ready for the backup hook's actions to write into."""
    return await asyncio.to_thread(storage.prepare, key)


async def record_files(storage: BackupStorage, key: str, folder: Path) -> BackupRecord:
    """Record (and, for a bucket, upload) each file the backup hook's actions wrote."""
    try:
        files = await asyncio.to_thread(storage.publish, key)
    except StorageError as error:
        raise StepFailed(str(error)) from None
    if not files:
        raise StepFailed(
            f"The backup hook's actions wrote no file into {folder}: there is nothing to restore. "
            "The driver's backup action must write the backup's files there."
        )
    return BackupRecord(
        location=storage.describe(),
        files=[BackupFileRecord(name=f.name, size=f.size, sha256=f.sha256) for f in files],
    )


async def check_files(storage: BackupStorage, change: RestoreChange) -> None:
    """Fetch the backup's files and check each one's size and sha256 against its record."""
    recorded = [BackupFile(f.name, f.size, f.sha256) for f in change.files]
    try:
        problems = await asyncio.to_thread(storage.fetch, change.key, recorded)
    except StorageError as error:
        raise StepFailed(f"Backup {change.backup_id} cannot be restored: {error}") from None
    if problems:
        raise StepFailed(
            f"Backup {change.backup_id} cannot be restored: in {storage.where(change.key)}, "
            f"{'; '.join(problems)}. Nothing was changed; choose another backup."
        )


async def finish_restore(storage: BackupStorage, key: str) -> None:
    """Drop what the check fetched into the staging folder (a bucket's files)."""
    await asyncio.to_thread(storage.finish_restore, key)


async def bring_version_back(
    linked: LinkedChanges,
    url: str,
    token: str,
    deployment: str,
    step_id: int,
    app_version: str,
    driver_version: str,
) -> None:
    """Request the Helm-only upgrade to the backup's version, linked to ``step_id``, and wait for it."""
    task = await linked.upgrade_and_wait(
        url,
        token,
        deployment,
        app_version=app_version,
        driver_version=driver_version,
        started_by_step=step_id,
    )
    if task is not None and task.failed:
        raise StepFailed(
            f"Task {task.id} (upgrade to application version {app_version}, driver {driver_version}) "
            f"failed: {task.error or 'no error given'}"
        )


async def delete_files(locations: BackupLocations | None, change: DeleteBackupChange) -> DeletedBackup:
    """Delete a backup's files from the storage location it was written to."""
    storage = await open_storage(locations, change)
    try:
        await asyncio.to_thread(storage.delete, change.key)
    except StorageError as error:
        raise StepFailed(str(error)) from None
    return DeletedBackup(location=storage.describe(), key=change.key)


async def check_location(location: dict[str, Any], locations: BackupLocations | None) -> str | None:
    """Write, read back and delete a probe object in ``location``: None when that worked, else what failed."""
    if locations is None:
        return NO_BACKUP_STORAGE_ERROR
    try:
        storage = await locations.open(location)
        await asyncio.to_thread(storage.probe)
    except StorageError as error:
        return str(error)
    return None
