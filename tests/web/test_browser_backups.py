"""Backups in a real browser (headless Debian Chromium, Playwright): a person takes a backup from the
deployment page, and restores the backup a failed upgrade's pre-hook took from that upgrade's page, each
after a confirmation. The agent's part is played by the test (tests/actions runs the real one)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.drivers import DeploymentConfiguration
from styrmin_backend.services import auth, backups, changes
from styrmin_backend.store.models import TaskRow
from tests.web.conftest import LiveServer, log_in, screenshot
from tests.web.test_backups_page import _finish_backup, _push_with_actions

pytestmark = pytest.mark.slow


def _deploy(live: LiveServer, name: str) -> None:
    """Deployment ``name`` of a driver with backup and restore actions, its create task ended."""
    stack, progress = live.stack, live.progress
    with stack.session() as session:
        admin = auth.authenticate(session, stack.token_for("admin"))
        created = changes.create_deployment(
            session, by=admin, name=name, namespace=name, driver_name="shop", driver_version="2.0.0",
            app_version=None, configuration=DeploymentConfiguration(),
        )  # fmt: skip
        assert created.task is not None
        task_id = created.task.id
    progress.start(task_id)
    progress.end_step(progress.step(task_id, "Install the application"))
    progress.end(task_id, result={"applied": {"app_version": "1.0.0", "driver_version": "2.0.0"}})


@pytest.fixture(scope="module", autouse=True)
def _driver_with_backup_actions(live_server: LiveServer) -> None:
    _push_with_actions(live_server.stack, "2.0.0")


def test_take_a_backup_from_the_deployment_page(new_page: Any, live_server: LiveServer) -> None:
    _deploy(live_server, "clicked")
    page = new_page()
    log_in(page, "operator")
    page.goto("/deployments/clicked")
    section = page.locator("#backups")
    expect(section).to_contain_text("No backups yet.")

    section.get_by_role("button", name="Back up…").click()
    expect(page.get_by_role("heading", name='Back up "clicked"?')).to_be_visible()
    page.get_by_role("button", name="Back up clicked").click()

    expect(page).to_have_url(re.compile(r"/tasks/\d+$"))
    task_id = int(page.url.rsplit("/", 1)[1])
    _finish_backup(live_server.stack, task_id)
    with live_server.stack.session() as session:
        (backup,) = backups.list_backups(session, "clicked")
        backup_id = backup.id
    page.goto("/deployments/clicked")
    row = page.locator("#backups").get_by_role("row", name=re.compile(f"#{backup_id}"))
    expect(row).to_contain_text("Succeeded")
    expect(row).to_contain_text("manual")
    expect(row.get_by_role("button", name="Restore…")).to_be_visible()
    screenshot(page, "backups-section")


def test_restore_a_failed_upgrade_from_its_task_page(new_page: Any, live_server: LiveServer) -> None:
    stack, progress = live_server.stack, live_server.progress
    _deploy(live_server, "undone")
    upgrade = progress.upgrade("undone", "1.1.0")
    progress.start(upgrade)
    pre = progress.step(upgrade, hook_step_name(Hook.UPGRADE, Mode.PRE))
    _, token = stack.actions_token(task_id=upgrade)
    taken = stack.client.post(
        "/api/v1/deployments/undone/backups",
        json={"started_by_step": pre},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert taken.status_code == 202, taken.text
    backup_id = taken.json()["backup"]["id"]
    _finish_backup(stack, taken.json()["task"]["id"])
    progress.end_step(pre)
    core = progress.step(upgrade, hook_step_name(Hook.UPGRADE, Mode.CORE))
    progress.end_step(core, error="Command shop migrate failed with exit code 3")
    progress.end(upgrade, error="Step Run the upgrade hook failed.")
    page = new_page()
    log_in(page, "operator")

    page.goto(f"/tasks/{upgrade}")
    way_back = page.locator("#way-back")
    expect(way_back).to_contain_text(f"its pre-hook took backup #{backup_id} at application version 1.0.0")
    screenshot(page, "failed-upgrade-way-back")
    way_back.get_by_role("button", name="Restore the backup taken before this upgrade").click()
    expect(page.get_by_role("heading", name=f'Restore backup {backup_id} onto "undone"?')).to_be_visible()
    expect(page.get_by_text("the driver's restore hook replaces the deployment's data")).to_be_visible()
    with stack.session() as session:
        assert [t.type for t in session.query(TaskRow).filter_by(deployment_name="undone")] == [
            "create",
            "upgrade",
            "backup",
        ]  # the confirmation changed nothing
    page.get_by_role("button", name=f"Restore backup {backup_id}").click()

    expect(page).to_have_url(re.compile(r"/tasks/\d+$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("Restore")
    with stack.session() as session:
        restore = session.get(TaskRow, int(page.url.rsplit("/", 1)[1]))
        assert restore is not None and (restore.type, restore.deployment_name) == ("restore", "undone")
