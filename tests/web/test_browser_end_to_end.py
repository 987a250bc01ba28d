"""The web UI on the whole of Styrmin: what the browser asks for, a real agent runs.

The server, the embedded local cluster, a local Prefect server and an agent run in this process (the
driver author's harness); the example shop driver's actions run as Prefect flows and its migration
runs as a Job. Nothing here records progress by hand: every step the page shows is the agent's.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

import styrmin
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.testing import StyrminStack, describe
from tests.support.drivers import EXAMPLE_DRIVER
from tests.web.conftest import USER_PASSWORD, log_in, screenshot

pytestmark = pytest.mark.slow

UPGRADE_HOOK = hook_step_name(Hook.UPGRADE, Mode.CORE)
SETUP_POST_HOOK = hook_step_name(Hook.SETUP, Mode.POST)
TASK_SECONDS = 180  # the longest a task of the example may take on a loaded machine
TASK_MS = TASK_SECONDS * 1000


@pytest.fixture(scope="module")
def whole(whole_stack: StyrminStack) -> StyrminStack:
    """The worker's whole stack (tests/conftest.py) with the example driver and an operator."""
    whole_stack.push_driver(EXAMPLE_DRIVER)
    whole_stack.client.users.create("operator", role="read-write", password=USER_PASSWORD)
    return whole_stack


@pytest.fixture(scope="module")
def site_url(whole: StyrminStack) -> str:
    return whole.url


def _created(whole: StyrminStack, name: str, app_version: str) -> None:
    task = whole.create(name, driver="shop", driver_version="1.0.0", app_version=app_version)
    assert task.status == "succeeded", describe(task)


def _component_row(page: Any, component: str) -> Any:
    return page.locator("#deployment-state").get_by_role("row", name=re.compile(f"^{component}"))


def _upgrade_through_the_page(page: Any, name: str, app_version: str) -> int:
    """Ask for an upgrade on the deployment page; returns the id of the task it started."""
    page.goto(f"/deployments/{name}")
    page.get_by_role("link", name="Upgrade…").click()
    page.get_by_label("Application version").fill(app_version)
    page.get_by_role("button", name="Review the upgrade").click()
    page.get_by_role("button", name="Upgrade", exact=True).click()
    expect(page).to_have_url(re.compile(rf"/deployments/{name}$"))
    heading = page.get_by_role("heading", name=re.compile(r"Latest task: Upgrade #\d+"))
    found = re.search(r"#(\d+)", heading.inner_text())
    assert found
    return int(found.group(1))


def test_create_the_example_then_upgrade_it_and_watch_the_steps_turn_green_live(
    new_page: Any, whole: StyrminStack
) -> None:
    page = new_page()
    log_in(page, "operator")
    page.get_by_role("link", name="Create a deployment").click()
    page.get_by_label("Name", exact=True).fill("shop-live")
    page.get_by_label("Namespace").fill("shop-live")
    with page.expect_response(re.compile(r"/new-deployment/components")):
        page.get_by_label("Driver and version").select_option("shop@1.0.0")
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")
    page.get_by_role("button", name="Review the deployment").click()
    page.get_by_role("button", name="Create deployment").click()
    expect(page).to_have_url(re.compile(r"/deployments/shop-live$"))
    page.evaluate("window.__notReloaded = true")
    created = page.locator(".task-live")
    expect(created).to_have_attribute("data-status", "succeeded", timeout=TASK_MS)
    expect(created.locator(f'[data-step="{SETUP_POST_HOOK}"]')).to_contain_text("Succeeded")
    # The agent reports the workloads at the task's end; the components table follows without a reload.
    expect(_component_row(page, "server")).to_contain_text("1 of 1 ready", timeout=20_000)
    expect(page.locator("#deployment-status")).to_contain_text("Running")
    assert page.evaluate("window.__notReloaded") is True

    task_id = _upgrade_through_the_page(page, "shop-live", "2.0.0")
    page.evaluate("window.__notReloaded = true")
    live = page.locator(f"#task-live-{task_id}")
    hook = live.locator(f'[data-step="{UPGRADE_HOOK}"]')
    expect(hook).to_contain_text("Running", timeout=TASK_MS)
    screenshot(page, "real-upgrade-running")
    expect(live).to_have_attribute("data-status", "succeeded", timeout=TASK_MS)
    expect(hook).to_contain_text("Succeeded")
    expect(live.locator(".step-succeeded")).to_have_count(live.locator("[data-step]").count())
    # The hook's action stopped the workers, upgraded the chart and started them again: tasks of their own.
    started = hook.locator(".started")
    for kind in ("Stop", "Upgrade", "Start"):
        expect(started.get_by_role("link", name=re.compile(f"^{kind} task #"))).to_be_visible()
    expect(started).not_to_contain_text("Failed")
    expect(page.locator("#deployment-state")).to_contain_text("2.0.0")
    screenshot(page, "real-upgrade-succeeded")
    assert page.evaluate("window.__notReloaded") is True


def test_a_failing_migration_shows_its_output_and_the_tasks_its_hook_started(
    new_page: Any, whole: StyrminStack
) -> None:
    _created(whole, "shop-down", "2.0.0")
    page = new_page()
    log_in(page, "operator")
    # The example's migrations only go forward: asking for an older version makes the migration fail.
    task_id = _upgrade_through_the_page(page, "shop-down", "1.5.0")
    live = page.locator(f"#task-live-{task_id}")
    expect(live).to_have_attribute("data-status", "failed", timeout=TASK_MS)
    expect(page.locator("#deployment-status")).to_contain_text("Upgrade failed", timeout=10_000)
    expect(page.locator("#deployment-state")).to_contain_text("The upgrade to 1.5.0 failed", timeout=10_000)

    page.get_by_role("link", name=f"Upgrade #{task_id}").first.click()
    expect(page).to_have_url(re.compile(rf"/tasks/{task_id}$"))
    hook = page.locator(f'[data-step="{UPGRADE_HOOK}"]')
    expect(hook).to_contain_text("Failed")
    expect(hook).to_contain_text("Cannot migrate the database from 2.0.0 down to 1.5.0")
    output = hook.get_by_label(f"Output of {UPGRADE_HOOK}")
    expect(output).to_be_hidden()
    hook.get_by_text("Show output").click()
    expect(output).to_be_visible()
    expect(output).to_contain_text("Checking migrations from 2.0.0 to 1.5.0")
    expect(output).to_contain_text("migrations only go forward")
    flow_run = hook.get_by_role("link", name=re.compile("Flow run in the Prefect UI"))
    prefect_ui = re.escape(whole.prefect_ui_url)
    expect(flow_run).to_have_attribute("href", re.compile(rf"^{prefect_ui}/runs/flow-run/[0-9a-f-]{{36}}$"))
    screenshot(page, "real-migration-failed")

    stop = hook.locator(".started").get_by_role("link", name=re.compile(r"^Stop task #\d+"))
    stop.click()
    expect(page).to_have_url(re.compile(r"/tasks/\d+$"))
    expect(page.locator(".task-live")).to_have_attribute("data-status", "succeeded")
    started_by = page.locator("dt", has_text="Started by").locator("xpath=following-sibling::dd")
    expect(started_by).to_contain_text(f"Upgrade task #{task_id}")
    expect(started_by).to_contain_text(UPGRADE_HOOK)
    started_by.get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"/tasks/{task_id}$"))


def test_stop_and_start_a_component_and_watch_its_workload_follow(new_page: Any, whole: StyrminStack) -> None:
    _created(whole, "shop-stop", "1.0.0")
    page = new_page()
    log_in(page, "operator")
    page.goto("/deployments/shop-stop")
    worker = _component_row(page, "task-worker")
    expect(worker).to_contain_text("1 of 1 ready")
    page.get_by_role("button", name="Stop component task-worker").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("Stop")
    page.get_by_role("button", name="Stop task-worker").click()
    expect(page).to_have_url(re.compile(r"/deployments/shop-stop$"))
    page.evaluate("window.__notReloaded = true")
    expect(worker).to_contain_text("0 of 0 ready", timeout=TASK_MS)
    expect(worker).to_contain_text("Stopped")
    expect(page.locator("#deployment-status")).to_contain_text("Stopped")
    # Only the stopped component says so; the server still runs and is ready.
    server = _component_row(page, "server")
    expect(server).to_contain_text("Ready")
    expect(server).not_to_contain_text("Stopped")
    screenshot(page, "real-component-stopped")
    page.get_by_role("button", name="Start component task-worker").click()
    page.get_by_role("button", name="Start task-worker").click()
    expect(page).to_have_url(re.compile(r"/deployments/shop-stop$"))
    page.evaluate("window.__notReloaded = true")
    expect(worker).to_contain_text("1 of 1 ready", timeout=TASK_MS)
    expect(page.locator("#deployment-status")).to_contain_text("Running")
    assert page.evaluate("window.__notReloaded") is True


def test_a_failed_upgrade_requested_again_or_retried_starts_a_new_task(whole: StyrminStack) -> None:
    _created(whole, "shop-again", "2.0.0")
    # The example's migrations only go forward: the upgrade to an older version fails.
    failed = whole.upgrade("shop-again", app_version="1.5.0", timeout=TASK_SECONDS)
    assert failed.status == "failed", describe(failed)
    shown = whole.client.deployments.get("shop-again")
    assert shown.status == "upgrade-failed" and f"task #{failed.id}" in shown.status_reason
    # The same request again is not "nothing to do": it starts a new upgrade, which runs the hooks again.
    again = whole.client.deployments.upgrade("shop-again", app_version="1.5.0")
    assert again.task is not None and again.task.id > failed.id
    second = whole.wait(again, TASK_SECONDS)
    assert second.status == "failed" and UPGRADE_HOOK in [s.name for s in second.steps], describe(second)
    # Retrying the latest failed upgrade starts another; the earlier one can no longer be retried.
    retried = whole.client.tasks.retry(second.id)
    assert retried.task is not None and retried.task.id > second.id and retried.task.type == "upgrade"
    third = whole.wait(retried, TASK_SECONDS)
    assert "Cannot migrate the database from" in describe(third)
    with pytest.raises(styrmin.ConflictError, match="not the latest upgrade task"):
        whole.client.tasks.retry(failed.id)
