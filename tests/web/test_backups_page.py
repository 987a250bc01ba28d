"""The deployment page's Backups section, its confirmations, and the way back on a failed upgrade."""

from __future__ import annotations

import html
import tempfile
from pathlib import Path
from typing import Any

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.roles import Role
from styrmin_backend.drivers import DeploymentConfiguration, DriverReport, read_driver
from styrmin_backend.services import auth, backups, changes, drivers, workflow
from styrmin_backend.store.models import TaskRow
from tests.api.conftest import ADMIN_PASSWORD, USER_PASSWORD, Stack
from tests.support.drivers import driver_folder
from tests.web.conftest import Progress, login_client, make_user

FILES = [{"name": "shop.sqlite3", "size": 4096, "sha256": "cd" * 32}]


def _push_with_actions(stack: Stack, version: str) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        package = read_driver(driver_folder(Path(scratch) / "shop", version=version, with_actions=True))
    with stack.session() as session:
        drivers.push_driver(session, package, DriverReport(), pushed_by="admin")


def _deploy_with_actions(stack: Stack) -> int:
    """Deployment "shop" of a driver with backup and restore actions, created; its create task's id."""
    _push_with_actions(stack, "2.0.0")
    return _deploy(stack, "shop")


def _deploy(stack: Stack, name: str) -> int:
    """Deployment ``name`` of driver shop 2.0.0 (pushed already), its create task ended; that task's id."""
    with stack.session() as session:
        admin = auth.authenticate(session, stack.token_for("admin"))
        created = changes.create_deployment(
            session, by=admin, name=name, namespace=name, driver_name="shop", driver_version="2.0.0",
            app_version=None, configuration=DeploymentConfiguration(),
        )  # fmt: skip
        assert created.task is not None
        task_id = created.task.id
    progress = Progress(stack)
    progress.start(task_id)
    progress.end_step(progress.step(task_id, "Install the application"))
    progress.end(task_id, result={"applied": {"app_version": "1.0.0", "driver_version": "2.0.0"}})
    return task_id


def _upgrade_failing_after_its_pre_upgrade_backup(stack: Stack, name: str) -> tuple[int, dict[str, Any]]:
    """Upgrade ``name`` to 1.1.0 as the agent would: its pre-hook takes a backup, which ends, then its core
    step fails; the upgrade task is left running. Its id, and the backup as the API answered."""
    progress = Progress(stack)
    upgrade = progress.upgrade(name, "1.1.0")
    progress.start(upgrade)
    pre = progress.step(upgrade, hook_step_name(Hook.UPGRADE, Mode.PRE))
    _, token = stack.actions_token(task_id=upgrade)
    taken = stack.client.post(
        f"/api/v1/deployments/{name}/backups",
        json={"started_by_step": pre},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert taken.status_code == 202, taken.text
    _finish_backup(stack, taken.json()["task"]["id"])
    progress.end_step(pre)
    core = progress.step(upgrade, hook_step_name(Hook.UPGRADE, Mode.CORE))
    progress.end_step(core, error="Command shop migrate failed with exit code 3")
    backup: dict[str, Any] = taken.json()["backup"]
    return upgrade, backup


def _finish_backup(stack: Stack, task_id: int, error: str | None = None) -> None:
    """End a backup task as the agent does, files recorded."""
    progress = Progress(stack)
    progress.start(task_id)
    progress.end_step(progress.step(task_id, hook_step_name(Hook.BACKUP, Mode.CORE)), error=error)
    with stack.session() as session:
        result = None if error else {"backup": {"location": "folder /srv/backups", "files": FILES}}
        task = workflow.end_task(session, task_id, error=error, result=result)
        backups.record_backup_end(session, task)


def test_a_driver_without_a_backup_action_shows_why_and_no_button(web: Stack) -> None:
    Progress(web).finish_create(Progress(web).create("shop"))
    login_client(web.client, "admin", ADMIN_PASSWORD)
    section = web.client.get("/deployments/shop/backups")
    assert section.status_code == 200
    assert (
        "This deployment cannot be backed up: its driver shop@1.0.0 declares no action for the backup hook."
        in section.text
    )
    assert "Back up…" not in section.text
    assert 'hx-get="/deployments/shop/backups"' in web.client.get("/deployments/shop").text


def test_back_up_then_restore_from_the_page_each_after_a_confirmation(web: Stack) -> None:
    _deploy_with_actions(web)
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    assert "Back up…" in web.client.get("/deployments/shop/backups").text

    confirm = web.client.post("/deployments/shop/backups", data={"csrf_token": csrf})
    assert confirm.status_code == 200 and 'Back up "shop"?' in html.unescape(confirm.text)
    assert web.client.get("/deployments/shop/backups").text.count("<tr>") == 0  # nothing taken yet
    taken = web.client.post(
        "/deployments/shop/backups", data={"csrf_token": csrf, "confirmed": "yes"}, follow_redirects=False
    )
    assert taken.status_code == 303 and taken.headers["location"].startswith("/tasks/")
    task_id = int(taken.headers["location"].rsplit("/", 1)[1])
    _finish_backup(web, task_id)
    with web.session() as session:
        (backup,) = backups.list_backups(session, "shop")
        backup_id = backup.id  # a dry run may have used an id on PostgreSQL: read it
    section = web.client.get("/deployments/shop/backups").text
    assert f"#{backup_id}" in section and "Restore…" in section and "4096 bytes" in section

    confirm = web.client.post(
        "/deployments/shop/restore", data={"csrf_token": csrf, "backup_id": str(backup_id)}
    )
    assert f'Restore backup {backup_id} onto "shop"?' in html.unescape(confirm.text)
    assert f"Backup {backup_id} was taken at application version 1.0.0" in confirm.text
    restored = web.client.post(
        "/deployments/shop/restore",
        data={"csrf_token": csrf, "backup_id": str(backup_id), "confirmed": "yes"},
        follow_redirects=False,
    )
    assert restored.status_code == 303
    with web.session() as session:
        task = session.get(TaskRow, int(restored.headers["location"].rsplit("/", 1)[1]))
        assert task is not None and task.type == "restore"


def test_a_read_only_user_sees_backups_without_buttons_and_cannot_post(web: Stack) -> None:
    _deploy_with_actions(web)
    make_user(web, "reader", Role.READ_ONLY)
    csrf = login_client(web.client, "reader", USER_PASSWORD)
    section = web.client.get("/deployments/shop/backups").text
    assert "No backups yet." in section and "Back up…" not in section
    refused = web.client.post("/deployments/shop/backups", data={"csrf_token": csrf, "confirmed": "yes"})
    assert refused.status_code == 403
    with web.session() as session:
        assert backups.list_backups(session, "shop") == []


def test_a_failed_upgrade_offers_the_backup_its_pre_hook_took(web: Stack) -> None:
    progress = Progress(web)
    create_id = _deploy_with_actions(web)
    upgrade, backup = _upgrade_failing_after_its_pre_upgrade_backup(web, "shop")
    assert backup["label"] == "pre-upgrade"
    login_client(web.client, "admin", ADMIN_PASSWORD)
    assert web.client.get(f"/tasks/{upgrade}/way-back").status_code == 204  # still running
    progress.end(upgrade, error="Step Run the upgrade hook failed.")

    offered = web.client.get(f"/tasks/{upgrade}/way-back")

    assert offered.status_code == 200
    assert "Restore the backup taken before this upgrade" in offered.text
    assert f'value="{backup["id"]}"' in offered.text
    assert 'hx-get="/tasks/' in web.client.get(f"/tasks/{upgrade}").text
    create_task = web.client.get(f"/tasks/{create_id}/way-back")
    assert create_task.status_code == 286


def test_delete_a_backup_from_the_page_after_a_confirmation(web: Stack) -> None:
    _deploy_with_actions(web)
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    taken = web.client.post(
        "/deployments/shop/backups", data={"csrf_token": csrf, "confirmed": "yes"}, follow_redirects=False
    )
    _finish_backup(web, int(taken.headers["location"].rsplit("/", 1)[1]))
    with web.session() as session:
        (backup,) = backups.list_backups(session, "shop")
        backup_id = backup.id
    assert f'aria-label="Delete backup {backup_id}"' in web.client.get("/deployments/shop/backups").text

    confirm = web.client.post(f"/backups/{backup_id}/delete", data={"csrf_token": csrf})

    assert f'Delete backup {backup_id} of "shop"?' in html.unescape(confirm.text)
    assert "it can no longer be restored" in confirm.text
    with web.session() as session:
        assert (
            backups.get_backup(session, backup_id).status == "succeeded"
        )  # the confirmation changed nothing
    deleted = web.client.post(
        f"/backups/{backup_id}/delete", data={"csrf_token": csrf, "confirmed": "yes"}, follow_redirects=False
    )
    assert deleted.status_code == 303
    with web.session() as session:
        task = session.get(TaskRow, int(deleted.headers["location"].rsplit("/", 1)[1]))
        assert task is not None and task.type == "delete-backup"
        assert backups.get_backup(session, backup_id).status == "deleting"


def test_everyone_sees_where_backups_go_and_only_an_admin_sets_it(web: Stack) -> None:
    _deploy_with_actions(web)
    make_user(web, "writer", Role.READ_WRITE)
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    assert "Stored in the agent's own folder." in web.client.get("/deployments/shop/backups").text
    bad = web.client.post(
        "/clusters/local/backup-location",
        data={"csrf_token": csrf, "kind": "s3", "bucket": "shop-backups", "secret": "no-namespace"},
    )
    assert bad.status_code == 422 and "NAMESPACE/NAME" in bad.text
    web.client.post(
        "/clusters/local/backup-location",
        data={
            "csrf_token": csrf,
            "kind": "s3",
            "bucket": "shop-backups",
            "prefix": "prod",
            "endpoint_url": "http://127.0.0.1:9000",
            "secret": "styrmin/backup-bucket",
        },
    )
    page = web.client.get("/clusters/local/backup-location").text
    assert 'data-status="checking"' in page and "s3://shop-backups/prod at http://127.0.0.1:9000" in page

    csrf = login_client(web.client, "writer", USER_PASSWORD)
    page = web.client.get("/clusters/local/backup-location").text
    assert "styrmin/backup-bucket" in page and "Set the location" not in page
    refused = web.client.post(
        "/clusters/local/backup-location", data={"csrf_token": csrf, "kind": "folder", "folder": "/srv"}
    )
    assert refused.status_code == 403


def test_set_and_remove_a_backup_schedule_from_the_page(web: Stack) -> None:
    _deploy_with_actions(web)
    csrf = login_client(web.client, "admin", ADMIN_PASSWORD)
    assert "No backup schedule." in web.client.get("/deployments/shop/backups").text

    bad = web.client.post(
        "/deployments/shop/backup-schedule", data={"csrf_token": csrf, "cron": "61 * * * *"}
    )
    assert bad.status_code == 422
    saved = web.client.post(
        "/deployments/shop/backup-schedule",
        data={"csrf_token": csrf, "cron": "0 3 * * *", "keep_count": "7", "keep_days": ""},
        follow_redirects=False,
    )

    assert saved.status_code == 303
    section = web.client.get("/deployments/shop/backups").text
    assert "Scheduled: <code>0 3 * * *</code> (UTC)" in section and "keeps the newest 7" in section
    web.client.post("/deployments/shop/backup-schedule", data={"csrf_token": csrf, "remove": "yes"})
    assert "No backup schedule." in web.client.get("/deployments/shop/backups").text
