"""Previews on the confirm pages, the revisions page and rollback, and a step's log: in a real browser."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
from playwright.sync_api import expect

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.drivers import DeploymentConfiguration
from styrmin_backend.services import changes, tasks
from styrmin_backend.services.task_logs import FlowRunLine, FlowRunRef
from tests.web.conftest import LiveServer, log_in, screenshot

pytestmark = pytest.mark.slow

SECRET = "s3cret-value-never-shown"


def test_the_upgrade_confirm_page_shows_its_steps_and_the_changed_image(
    new_page: Any, live_server: LiveServer
) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("previewed"))
    page = new_page()
    log_in(page, "operator")
    page.goto("/deployments/previewed/upgrade")
    page.get_by_label("Application version").fill("1.1.0")
    page.get_by_role("button", name="Review the upgrade").click()

    preview = page.get_by_role("region", name="What this change will do")
    expect(preview).to_contain_text("Run the upgrade hook")
    expect(preview).to_contain_text("application 1.0.0 → driver 1.0.0, application 1.1.0")
    server = preview.locator('[data-object="Deployment/previewed-server"]')
    expect(server).to_contain_text("changed")
    diff = server.get_by_label("Diff of Deployment previewed-server")
    expect(diff).to_contain_text("+        image: example.com/shop/server:1.1.0")
    screenshot(page, "upgrade-preview")
    with live_server.stack.session() as session:
        assert changes.read_deployment(session, "previewed").last_revision == 1
    page.get_by_role("button", name="Upgrade", exact=True).click()
    expect(page).to_have_url(re.compile(r"/deployments/previewed$"))


def test_a_secret_env_value_is_not_on_the_configure_confirm_page(
    new_page: Any, live_server: LiveServer
) -> None:
    progress = live_server.progress
    configuration = DeploymentConfiguration(env={"server": {"API_TOKEN": SECRET}})
    progress.finish_create(progress.create("secretive", configuration))
    page = new_page()
    log_in(page, "operator")
    page.goto("/deployments/secretive/configure")
    page.get_by_label("Env vars for server").fill("API_TOKEN=another-secret-value\nLOG_LEVEL=debug")
    page.get_by_role("button", name=re.compile("Review")).click()

    preview = page.get_by_role("region", name="What this change will do")
    expect(preview).to_contain_text("<secret: changed>")
    # The stored secret is nowhere on the page; the new one only in the form that sends it again.
    assert SECRET not in page.content()
    assert "another-secret-value" not in preview.inner_html()


def test_roll_back_a_configuration_change_from_the_revisions_page(
    new_page: Any, live_server: LiveServer
) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("rolled"))
    with live_server.stack.session() as session:
        admin = live_server.stack.token_for("admin")
        from styrmin_backend.services import auth

        recorded = changes.configure_deployment(
            session,
            "rolled",
            by=auth.authenticate(session, admin),
            configuration=DeploymentConfiguration(values={"server": {"replicas": 3}}),
        )
        assert recorded.task is not None
        configured = recorded.task.id
    progress.start(configured)
    progress.end_step(progress.step(configured, "Apply the configuration"))
    progress.end(configured)
    page = new_page()
    log_in(page, "operator")
    page.goto("/deployments/rolled")
    page.get_by_role("link", name="Revisions…").click()
    expect(page.locator('tr[data-revision="2"]')).to_contain_text("Configure")
    page.get_by_role("button", name="Roll back to revision 1").click()
    preview = page.get_by_role("region", name="What this change will do")
    expect(preview).to_contain_text("Apply the configuration")
    expect(preview).to_contain_text("replicas: 3")
    page.get_by_role("button", name="Roll back", exact=True).click()
    expect(page).to_have_url(re.compile(r"/tasks/\d+$"))
    with live_server.stack.session() as session:
        assert changes.read_deployment(session, "rolled").configuration["values"] == {}


class InMemoryFakePrefectLogs:
    """A fake Prefect log reader (in memory) for the page's link; the real one is tested on Prefect."""

    def __init__(self, name: str, revision: int) -> None:
        self.prefix = f"{name}-r{revision}-"

    def flow_runs(self, tags: Any, name_prefix: str) -> list[FlowRunRef]:
        return [FlowRunRef(id="run-1", name=f"{self.prefix}upgrade", state="RUNNING")]

    def flow_run(self, flow_run_id: str) -> FlowRunRef | None:
        return None

    def lines(self, flow_run_ids: Any, offset: int, limit: int) -> list[FlowRunLine]:
        now = datetime.now(UTC)
        return [FlowRunLine("run-1", now, 20, "Migrating the database to 1.1.0")][offset:]


def test_each_hook_step_links_to_its_log(new_page: Any, live_server: LiveServer) -> None:
    progress = live_server.progress
    progress.finish_create(progress.create("logged"))
    task_id = progress.upgrade("logged", "1.1.0")
    progress.start(task_id)
    progress.step(task_id, hook_step_name(Hook.UPGRADE, Mode.CORE))
    app = live_server.stack.client.app
    with live_server.stack.session() as session:
        revision = tasks.get_task_detail(session, task_id).task.revision
    original = app.state.flow_run_logs
    app.state.flow_run_logs = lambda: InMemoryFakePrefectLogs("logged", revision)
    try:
        page = new_page()
        log_in(page, "reader")
        page.goto(f"/tasks/{task_id}")
        page.get_by_role("link", name=re.compile("Log of this step's actions")).click()
        expect(page).to_have_url(re.compile(rf"/tasks/{task_id}/logs\?step=1$"))
        expect(page.get_by_label("Log lines")).to_contain_text(
            "[1. upgrade] INFO Migrating the database to 1.1.0"
        )
    finally:
        app.state.flow_run_logs = original
