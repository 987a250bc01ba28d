"""The workflows of a backup and of a restore, and the folder that holds backups' files.

A backup runs the driver's backup hook (one step per mode that has actions), its actions writing into
the backup's folder, then records each file the actions wrote with its size and sha256. A restore
checks those files first, brings the application back to the backup's version through a linked
Helm-only upgrade task when the deployment runs another, then runs the restore hook of the driver
version that took the backup.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import styrmin
from styrmin_backend.domain.backups import (
    CHECK_FILES_STEP,
    RECORD_FILES_STEP,
    BackupFile,
    check_file_name,
    missing_files,
    restore_version_step,
)
from styrmin_backend.domain.hooks import MODE_ORDER, Hook

if TYPE_CHECKING:
    from styrmin_backend.agent.reconciliation import Reconciliation

# These workflows are part of the reconciliation, kept apart: they use its step and hook helpers.

MAX_BACKUP_FILES = 10_000
"""More files than this in one backup's folder is refused: archive them into fewer."""

_CHUNK = 1 << 20
LINKED_TASK_POLL_SECONDS = 0.5


class BackupFolder:
    """A storage location that is a folder the agent and the cluster's pods share.

    On the embedded local cluster pods run on this machine, so the folder is the same path for them;
    on a real cluster it is a hostPath or a mounted volume at the same path on the agent and the nodes.
    """

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def describe(self) -> str:
        """The location as records and pages show it."""
        return f"folder {self.root}"

    def folder(self, key: str) -> Path:
        """The folder of one backup's files."""
        return self.root / key

    def prepare(self, key: str) -> Path:
        """Create the backup's folder, empty, for its actions to write into."""
        folder = self.folder(key)
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def files(self, key: str) -> list[BackupFile]:
        """Every file in the backup's folder, with its size and sha256, read in chunks."""
        folder = self.folder(key)
        if not folder.is_dir():
            return []
        found: list[BackupFile] = []
        for directory, _, names in os.walk(folder):
            for name in sorted(names):
                path = Path(directory) / name
                if len(found) >= MAX_BACKUP_FILES:
                    raise ValueError(
                        f"The backup's folder {folder} holds more than {MAX_BACKUP_FILES} files; "
                        "archive them into fewer."
                    )
                digest = hashlib.sha256()
                size = 0
                with path.open("rb") as stream:
                    while chunk := stream.read(_CHUNK):
                        digest.update(chunk)
                        size += len(chunk)
                relative = path.relative_to(folder).as_posix()
                found.append(BackupFile(check_file_name(relative), size, digest.hexdigest()))
        return sorted(found, key=lambda f: f.name)


def _files_json(files: list[BackupFile]) -> list[dict[str, Any]]:
    return [{"name": f.name, "size": f.size, "sha256": f.sha256} for f in files]


def _backup_context(change: dict[str, Any], folder: Path) -> dict[str, Any]:
    return {"backup_id": int(change["backup_id"]), "backup_folder": str(folder)}


async def run_backup(reconciliation: Reconciliation, storage: BackupFolder) -> None:
    """The backup hook's modes with the backup's folder ready, then the record of its files."""
    from styrmin_backend.agent.reconciliation import StepFailed

    change = reconciliation.claim.change
    key = str(change["key"])
    folder = await asyncio.to_thread(storage.prepare, key)
    reconciliation.extra_context = _backup_context(change, folder)
    for mode in MODE_ORDER:
        await reconciliation._run_hook_mode(Hook.BACKUP, mode)
    async with reconciliation._step(RECORD_FILES_STEP):
        try:
            files = await asyncio.to_thread(storage.files, key)
        except ValueError as error:
            raise StepFailed(str(error)) from None
        if not files:
            raise StepFailed(
                f"The backup hook's actions wrote no file into {folder}: there is nothing to restore. "
                "The driver's backup action must write the backup's files there."
            )
        reconciliation._result["backup"] = {"location": storage.describe(), "files": _files_json(files)}


async def run_restore(reconciliation: Reconciliation, storage: BackupFolder) -> None:
    """Check the files, bring the version back (linked upgrade task), then the restore hook's modes."""
    from styrmin_backend.agent.reconciliation import StepFailed

    change = reconciliation.claim.change
    key = str(change["key"])
    app_version, driver_version = str(change["app_version"]), str(change["driver_version"])
    recorded = [BackupFile(str(f["name"]), int(f["size"]), str(f["sha256"])) for f in change["files"]]
    async with reconciliation._step(CHECK_FILES_STEP):
        found = await asyncio.to_thread(storage.files, key)
        problems = missing_files(recorded, found)
        if problems:
            raise StepFailed(
                f"Backup {change['backup_id']} cannot be restored: in {storage.folder(key)}, "
                f"{'; '.join(problems)}. Nothing was changed; choose another backup."
            )
    running = (change.get("from_app_version"), change.get("from_driver_version"))
    if running != (app_version, driver_version) or change.get("restores_configuration"):
        async with reconciliation._step(restore_version_step(app_version)) as step_id:
            await _upgrade_linked(reconciliation, step_id, app_version, driver_version)
    reconciliation.target = replace(
        reconciliation.target,
        driver_version=driver_version,
        app_version=app_version,
        current_app_version=app_version,
    )
    reconciliation.extra_context = _backup_context(change, storage.folder(key))
    for mode in MODE_ORDER:
        await reconciliation._run_hook_mode(Hook.RESTORE, mode)
    reconciliation._result["applied"] = {"app_version": app_version, "driver_version": driver_version}


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
