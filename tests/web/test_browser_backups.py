"""Backups in a real browser (headless Debian Chromium, Playwright): a person takes a backup from the
deployment page, and restores the backup a failed upgrade's pre-hook took from that upgrade's page, each
after a confirmation. The agent's part is played by the test (tests/actions runs the real one)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from styrmin_backend.services import backups
from styrmin_backend.store.models import TaskRow
from tests.web.conftest import LiveServer, log_in, screenshot
from tests.web.test_backups_page import (
    _deploy,
    _finish_backup,
    _push_with_actions,
    _upgrade_failing_after_its_pre_upgrade_backup,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _driver_with_backup_actions(live_server: LiveServer) -> None:
    _push_with_actions(live_server.stack, "2.0.0")


def test_take_a_backup_from_the_deployment_page(new_page: Any, live_server: LiveServer) -> None:
    _deploy(live_server.stack, "clicked")
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
    expect(row.get_by_role("button", name=f"Restore backup {backup_id}")).to_be_visible()
    screenshot(page, "backups-section")


def test_restore_a_failed_upgrade_from_its_task_page(new_page: Any, live_server: LiveServer) -> None:
    stack, progress = live_server.stack, live_server.progress
    _deploy(stack, "undone")
    upgrade, backup = _upgrade_failing_after_its_pre_upgrade_backup(stack, "undone")
    backup_id = backup["id"]
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
