"""The web UI in a real browser: headless Debian Chromium, driven by Playwright."""

from __future__ import annotations

import re
from typing import Any

import pytest
from playwright.sync_api import expect

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.limits import OUTPUT_TAIL_MAX_LINES
from styrmin_backend.domain.users import ACTIONS_USERNAME
from styrmin_backend.services import tasks
from tests.api.conftest import ADMIN_PASSWORD
from tests.web.conftest import LiveServer, log_in, screenshot

pytestmark = pytest.mark.slow

UPGRADE_HOOK = hook_step_name(Hook.UPGRADE, Mode.CORE)
# Whole words: a link named after the "Run the setup post-hook" step is not a "Set ..." control.
MUTATING_NAMES = re.compile(
    r"\b(upgrade|configur\w*|stop|start|delete|create|deactivate|activate|change|set|roll ?back|cancel)\b",
    re.I,
)


def _output(lines: int) -> str:
    return "\n".join(
        [f"migrating table {n}: ok" for n in range(lines - 2)]
        + ["Traceback (most recent call last):", "RuntimeError: column orders.total is missing"]
    )


def test_log_in_and_see_the_deployments_list(new_page: Any, live_server: LiveServer) -> None:
    live_server.progress.finish_create(live_server.progress.create("listed"))
    page = new_page()
    page.goto("/deployments")
    expect(page).to_have_url(re.compile(r"/login\?next=/deployments"))
    log_in(page, "admin", ADMIN_PASSWORD)
    row = page.get_by_role("row", name=re.compile("listed"))
    expect(row).to_contain_text("Shop 1.0.0")
    expect(row).to_contain_text("shop 1.0.0")
    expect(row).to_contain_text("Create #")
    expect(row).to_contain_text("Succeeded")
    screenshot(page, "deployments")
    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login$"))
    page.goto("/deployments")
    expect(page).to_have_url(re.compile(r"/login\?next=/deployments"))


def test_create_the_example_deployment_after_fixing_a_field(new_page: Any, live_server: LiveServer) -> None:
    page = new_page()
    log_in(page, "operator")
    page.get_by_role("link", name="Create a deployment").click()
    page.get_by_label("Name", exact=True).fill("My_Shop")
    page.get_by_label("Namespace").fill("shop")
    with page.expect_response(re.compile(r"/new-deployment/components")):
        page.get_by_label("Driver and version").select_option("shop@1.0.0")
    page.wait_for_function("() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling')")
    page.get_by_label("Env vars for server").fill("LOG_LEVEL=debug")
    page.get_by_role("button", name="Review the deployment").click()
    name = page.get_by_label("Name", exact=True)
    expect(name).to_have_attribute("aria-invalid", "true")
    error = page.locator("#name-error")
    expect(error).to_contain_text("is not a valid deployment name")
    assert "name-error" in (name.get_attribute("aria-describedby") or "")
    expect(page.get_by_label("Env vars for server")).to_have_value("LOG_LEVEL=debug")
    screenshot(page, "create-error")
    name.fill("my-shop")
    page.get_by_role("button", name="Review the deployment").click()
    # The review shows the objects the chart makes; Change brings the form back as it was filled.
    expect(page.get_by_role("heading", name='Create deployment "my-shop"?')).to_be_visible()
    expect(page.locator('[data-object="Deployment/my-shop-server"]')).to_contain_text(
        "Deployment/my-shop-server"
    )
    page.get_by_role("button", name="Change").click()
    expect(page.get_by_label("Env vars for server")).to_have_value("LOG_LEVEL=debug")
    page.get_by_role("button", name="Review the deployment").click()
    page.get_by_role("button", name="Create deployment").click()
    expect(page).to_have_url(re.compile(r"/deployments/my-shop$"))
    expect(page.get_by_role("heading", level=1)).to_contain_text("my-shop")
    expect(page.get_by_role("heading", name=re.compile("Latest task: Create"))).to_be_visible()
    expect(page.get_by_text("LOG_LEVEL=debug")).to_be_visible()
    expect(page.get_by_text("Waiting for the agent to start this task.").first).to_be_visible()


def test_upgrade_and_watch_the_steps_turn_green_live(new_page: Any, live_server: LiveServer) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("live"))
    page = new_page()
    log_in(page, "operator")
    page.goto("/deployments/live")
    page.get_by_role("link", name="Upgrade…").click()
    page.get_by_label("Application version").fill("1.1.0")
    page.get_by_label("Driver version").select_option("1.1.0")
    page.get_by_role("button", name="Review the upgrade").click()
    expect(page.get_by_text("Application version: 1.0.0 → 1.1.0")).to_be_visible()
    page.get_by_role("button", name="Upgrade", exact=True).click()
    expect(page).to_have_url(re.compile(r"/deployments/live$"))
    expect(page.get_by_role("heading", name=re.compile("Latest task: Upgrade"))).to_be_visible()
    page.evaluate("window.__notReloaded = true")

    with live_server.stack.session() as session:
        task_id = tasks.list_tasks(session, deployment="live", limit=1).items[0].id
    # The task's row in the history follows it as the latest task does: never a state behind.
    row = page.locator(f'#history tr[data-task="{task_id}"]')
    expect(row).to_contain_text("Pending")
    progress.start(task_id)
    live = page.locator(f"#task-live-{task_id}")
    expect(live).to_have_attribute("data-status", "running")
    expect(row).to_contain_text("Running")
    pre = progress.step(task_id, hook_step_name(Hook.UPGRADE, Mode.PRE))
    step = live.locator(f'[data-step="{hook_step_name(Hook.UPGRADE, Mode.PRE)}"]')
    expect(step).to_contain_text("Running")
    progress.end_step(pre)
    expect(step).to_contain_text("Succeeded")
    core = progress.step(task_id, UPGRADE_HOOK)
    expect(live.locator(f'[data-step="{UPGRADE_HOOK}"]')).to_contain_text("Running")
    screenshot(page, "upgrade-running")
    progress.end_step(core)
    progress.end(task_id)
    expect(live).to_have_attribute("data-status", "succeeded")
    expect(live.locator(f'[data-step="{UPGRADE_HOOK}"]')).to_contain_text("Succeeded")
    expect(live.locator(".step-succeeded")).to_have_count(2)
    expect(row).to_contain_text("Succeeded")
    expect(row).to_have_attribute("data-status", "succeeded")
    assert page.evaluate("window.__notReloaded") is True
    # Once the task has ended the page stops asking.
    assert live.get_attribute("hx-trigger") is None


def test_failed_migration_shows_output_and_links_the_tasks_its_hook_started(
    new_page: Any, live_server: LiveServer
) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("failing"))
    task_id, child_id = progress.failed_upgrade("failing", "1.1.0", _output(OUTPUT_TAIL_MAX_LINES))
    page = new_page()
    log_in(page, "reader")
    page.goto("/deployments/failing")
    page.get_by_role("link", name=re.compile(f"Upgrade #{task_id}")).first.click()
    expect(page).to_have_url(re.compile(rf"/tasks/{task_id}$"))
    expect(page.get_by_text("Failed").first).to_be_visible()
    hook = page.locator(f'[data-step="{UPGRADE_HOOK}"]')
    expect(hook).to_contain_text("Command infrahub db migrate failed with exit code 3")
    expect(hook.get_by_role("list", name="Notes")).to_contain_text("Deleted Job failing-migrate-7f3c")
    output = hook.get_by_label(f"Output of {UPGRADE_HOOK}")
    expect(output).to_be_hidden()
    expect(hook.get_by_text("Earlier output was cut")).to_be_hidden()
    hook.get_by_text("Show output").click()
    expect(output).to_be_visible()
    expect(output).to_contain_text("RuntimeError: column orders.total is missing")
    expect(hook.get_by_text("Earlier output was cut")).to_be_visible()
    flow_run = hook.get_by_role("link", name=re.compile("Flow run in the Prefect UI"))
    expect(flow_run).to_have_attribute(
        "href", re.compile(r"^http://127\.0\.0\.1:4200/runs/flow-run/0b5c2a8e-7f3c-4a61-9d2e-3f1c5e7a9b10$")
    )
    started = hook.get_by_role("link", name=f"Stop task #{child_id}")
    expect(hook.locator(".started")).to_contain_text("Succeeded")
    screenshot(page, "task-failed")
    started.click()
    expect(page).to_have_url(re.compile(rf"/tasks/{child_id}$"))
    started_by = page.locator("dt", has_text="Started by").locator("xpath=following-sibling::dd")
    expect(started_by).to_contain_text(f"Upgrade task #{task_id}")
    expect(started_by).to_contain_text(UPGRADE_HOOK)
    started_by.get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"/tasks/{task_id}$"))


def test_read_only_user_finds_no_mutating_control_and_is_refused_anyway(
    new_page: Any, live_server: LiveServer
) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("readonly"))
    page = new_page()
    log_in(page, "reader")
    for path in ("/deployments", "/deployments/readonly", "/users", "/drivers", "/tasks/1", "/agents"):
        page.goto(path)
        buttons = [b.strip() for b in page.get_by_role("button").all_inner_texts()]
        assert buttons == ["Log out"], (path, buttons)
        assert page.locator("form[method=post]:not([action='/logout'])").count() == 0, path
        links = page.get_by_role("link").all_inner_texts()
        # Links to tasks are named by their type ("Stop #7"); every other link must not mutate.
        assert not [text for text in links if MUTATING_NAMES.search(text) and not re.search(r"#\d+", text)], (
            path,
            links,
        )
    # The forms' own endpoints refuse the reader, with a valid CSRF token from the page.
    csrf = page.locator("form[action='/logout'] input[name=csrf_token]").get_attribute("value")
    for path, form in (
        ("/deployments/readonly/stop", {"component": "server", "confirmed": "yes"}),
        ("/deployments/readonly/delete", {"confirmed": "yes"}),
        ("/users/reader/role", {"role": "admin"}),
    ):
        response = page.request.post(path, form={**form, "csrf_token": csrf}, max_redirects=0)
        assert response.status == 403, path
        assert "Read-only" in response.text()
    page.goto("/deployments/readonly")
    expect(page.locator("h1 .status")).to_contain_text(
        "Running"
    )  # the refused stop and delete changed nothing
    expect(page.get_by_role("row", name=re.compile("^Stop #"))).to_have_count(0)


def test_users_page_marks_styrmin_actions_built_in_without_password_controls(
    new_page: Any, live_server: LiveServer
) -> None:
    page = new_page()
    log_in(page, "admin", ADMIN_PASSWORD)
    page.get_by_role("link", name="Users").click()
    actions = page.locator(f'tr[data-user="{ACTIONS_USERNAME}"]')
    expect(actions).to_contain_text("Built-in")
    expect(actions).to_contain_text("No password")
    expect(actions.locator("input[type=password]")).to_have_count(0)
    expect(page.get_by_label(f"New password for {ACTIONS_USERNAME}")).to_have_count(0)
    expect(page.get_by_label("New password for reader")).to_be_visible()
    expect(page.get_by_label(f"Role of {ACTIONS_USERNAME}", exact=True)).to_have_value("read-write")
    screenshot(page, "users")
    page.get_by_label("User name").fill("auditor")
    page.get_by_label("Role", exact=True).select_option("read-only")
    page.get_by_label("Password", exact=True).fill("auditor-password")
    page.get_by_role("button", name="Create user").click()
    expect(page.locator('tr[data-user="auditor"]')).to_contain_text("Active")
    page.get_by_role("button", name="Deactivate auditor").click()
    expect(page.locator('tr[data-user="auditor"]')).to_contain_text("Deactivated")


def test_drivers_page_lists_components_and_actions(new_page: Any, live_server: LiveServer) -> None:
    page = new_page()
    log_in(page, "reader")
    page.get_by_role("link", name="Drivers").click()
    section = page.get_by_role("region", name="shop 1.1.0")
    expect(section.get_by_role("row", name=re.compile("^task-worker"))).to_contain_text("Deployment")
    expect(section).to_contain_text("No actions")


def test_every_control_is_labelled_and_reachable_by_keyboard(new_page: Any, live_server: LiveServer) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("keyboard"))
    page = new_page()
    page.goto("/login")
    expect(page.get_by_label("User name")).to_be_focused()
    page.keyboard.type("admin")
    page.keyboard.press("Tab")
    page.keyboard.type(ADMIN_PASSWORD)
    page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/deployments$"))
    page.keyboard.press("Tab")
    expect(page.get_by_role("link", name="Skip to content")).to_be_focused()
    for path in ("/deployments", "/new-deployment", "/deployments/keyboard", "/users", "/drivers", "/agents"):
        page.goto(path)
        unlabelled = page.evaluate(
            """() => [...document.querySelectorAll('input:not([type=hidden]), select, textarea, button')]
                .filter(el => !(el.labels && el.labels.length) && !el.getAttribute('aria-label')
                               && !el.textContent.trim())
                .map(el => el.outerHTML)"""
        )
        assert unlabelled == [], (path, unlabelled)
    page.goto("/deployments/keyboard")
    reached = []
    for _ in range(40):
        page.keyboard.press("Tab")
        reached.append(
            page.evaluate(
                "document.activeElement.getAttribute('aria-label') || document.activeElement.textContent.trim()"
            )
        )
    for name in ("Upgrade…", "Change configuration…", "Delete…", "Stop component server", "Log out"):
        assert any(name == text or (text and name in text) for text in reached), (name, reached)


def test_pages_read_well_in_dark_mode_and_on_a_phone(new_page: Any, live_server: LiveServer) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("dark"))
    task_id, _ = progress.failed_upgrade("dark", "1.1.0", _output(12), truncated=False)
    page = new_page(color_scheme="dark")
    log_in(page, "admin", ADMIN_PASSWORD)
    page.goto(f"/tasks/{task_id}")
    page.get_by_text("Show output").click()
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(18, 22, 28)"
    screenshot(page, "task-failed-dark")
    page.goto("/deployments/dark")
    screenshot(page, "deployment-dark")
    phone = new_page(width=390, height=844)
    log_in(phone, "admin", ADMIN_PASSWORD)
    phone.goto("/deployments/dark")
    screenshot(phone, "deployment-phone")
    # Wide tables scroll inside their frame; the page itself never scrolls sideways.
    assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")


def test_an_opened_output_stays_open_while_the_task_updates(new_page: Any, live_server: LiveServer) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("preserve"))
    task_id = progress.upgrade("preserve", "1.1.0")
    progress.start(task_id)
    pre = progress.step(task_id, hook_step_name(Hook.UPGRADE, Mode.PRE))
    progress.output(pre, _output(5), truncated=False)
    progress.end_step(pre, error="The pre-hook failed.")
    page = new_page()
    log_in(page, "reader")
    page.goto(f"/tasks/{task_id}")
    page.get_by_text("Show output").click()
    output = page.get_by_label(f"Output of {hook_step_name(Hook.UPGRADE, Mode.PRE)}")
    expect(output).to_be_visible()
    progress.end(task_id, error="Step Run the upgrade pre-hook failed.")
    expect(page.locator(f"#task-live-{task_id}")).to_have_attribute("data-status", "failed")
    expect(output).to_be_visible()


def test_an_admin_registers_an_agent_and_copies_its_key(new_page: Any, live_server: LiveServer) -> None:
    page = new_page()
    log_in(page, "admin", ADMIN_PASSWORD)
    page.get_by_role("link", name="Agents").click()
    page.get_by_label("Agent name").fill("eu-west-1")
    page.get_by_label("Cluster").fill("eu-west")
    page.get_by_role("button", name="Register agent").click()
    key = page.get_by_label("Key of agent eu-west-1")
    expect(key).to_contain_text("sta_")
    expect(page.locator('tr[data-agent="eu-west-1"]')).to_contain_text("Never connected")
    expect(page.locator('tr[data-agent="eu-west-1"]')).to_contain_text("none connected")
    screenshot(page, "agents")
    page.get_by_role("button", name="Revoke agent eu-west-1").click()
    page.get_by_role("button", name="Revoke eu-west-1").click()
    expect(page).to_have_url(re.compile(r"/agents$"))
    expect(page.locator('tr[data-agent="eu-west-1"]')).to_contain_text("Revoked")
    expect(page.get_by_label("Key of agent eu-west-1")).to_have_count(0)


def test_a_failed_upgrade_shows_on_the_list_and_page_and_is_retried_from_its_task_page(
    new_page: Any, live_server: LiveServer
) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("retried"))
    task_id, child_id = progress.failed_upgrade("retried", "1.1.0", "migration failed")
    reader = new_page()
    log_in(reader, "reader")
    reader.get_by_role("row", name=re.compile("retried")).get_by_text("Upgrade failed").wait_for()
    reader.goto(f"/tasks/{task_id}")
    expect(reader.locator(".task-live")).to_have_attribute("data-status", "failed")
    expect(reader.get_by_role("button", name=re.compile("Retry"))).to_have_count(0)

    page = new_page()
    log_in(page, "operator")
    page.goto("/deployments/retried")
    expect(page.locator("#deployment-status")).to_contain_text("Upgrade failed")
    expect(page.locator("#deployment-state")).to_contain_text("The upgrade to 1.1.0 failed")
    # A task an action started is part of its parent: only the parent offers a retry.
    page.goto(f"/tasks/{child_id}")
    expect(page.get_by_role("button", name=re.compile("Retry"))).to_have_count(0)
    page.goto(f"/tasks/{task_id}")
    page.get_by_role("button", name=f"Retry upgrade task #{task_id}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Retry upgrade task #{task_id}?")
    page.get_by_role("button", name="Retry", exact=True).click()
    expect(page).to_have_url(re.compile(r"/tasks/\d+$"))
    retried = int(page.url.rsplit("/", 1)[1])
    assert retried > task_id
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Upgrade task #{retried}")
    expect(page.locator(".task-live")).to_have_attribute("data-status", "pending")
    page.goto("/deployments/retried")
    expect(page.locator("#deployment-status")).to_contain_text("Deploying")
    # The failed task is no longer the latest upgrade: it offers no retry.
    page.goto(f"/tasks/{task_id}")
    expect(page.get_by_role("button", name=re.compile("Retry"))).to_have_count(0)


def test_a_running_task_is_cancelled_from_its_page_after_a_confirmation(
    new_page: Any, live_server: LiveServer
) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("cancelled"))
    task_id = progress.upgrade("cancelled", "1.1.0")
    reader = new_page()
    log_in(reader, "reader")
    reader.goto(f"/tasks/{task_id}")
    # Pending, with no agent of its cluster connected: the page says so.
    expect(reader.locator(".waiting")).to_contain_text('No agent of cluster "local" is connected')
    expect(reader.get_by_role("button", name=re.compile("Cancel"))).to_have_count(0)

    progress.start(task_id)
    progress.step(task_id, UPGRADE_HOOK)
    page = new_page()
    log_in(page, "operator")
    page.goto(f"/tasks/{task_id}")
    page.get_by_role("button", name=f"Cancel upgrade task #{task_id}").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text(f"Cancel upgrade task #{task_id}?")
    expect(page.get_by_text("Styrmin does not undo what the task did so far")).to_be_visible()
    page.get_by_role("button", name="Cancel the task").click()
    expect(page).to_have_url(re.compile(rf"/tasks/{task_id}$"))
    expect(page.locator(".task-live")).to_have_attribute("data-status", "cancelled")
    expect(page.locator(".task-live")).to_contain_text("Cancelled by")
    expect(page.locator(".alert.cancelled")).to_contain_text("Nothing it did was undone")
    expect(page.locator(f'li[data-step="{UPGRADE_HOOK}"]')).to_contain_text("Cancelled")
    # Cancelled like a failed task: it can be retried, and it can no longer be cancelled.
    expect(page.get_by_role("button", name=f"Retry upgrade task #{task_id}")).to_be_visible()
    expect(page.get_by_role("button", name=re.compile("^Cancel"))).to_have_count(0)
    screenshot(page, "task-cancelled")
