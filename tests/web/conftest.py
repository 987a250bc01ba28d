"""The web UI under test: a real server on loopback, Debian's Chromium driven by Playwright."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import Engine

from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.domain.roles import Role
from styrmin_backend.drivers import DeploymentConfiguration
from styrmin_backend.services import auth, changes, deployment_status, users, workflow
from styrmin_backend.store.db import make_engine
from styrmin_backend.store.models import StepRow
from tests.api.conftest import ADMIN_PASSWORD, USER_PASSWORD, Stack, make_stack
from tests.conftest import fresh_database_url
from tests.support.loopback import served

CHROMIUM = Path(os.environ.get("STYRMIN_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(os.environ.get("STYRMIN_TEST_ARTIFACTS", "test-artifacts")) / "web"
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')

__all__ = ["ADMIN_PASSWORD", "USER_PASSWORD"]


def login_form_token(client: TestClient) -> str:
    """The login page's CSRF token, fetched by ``client`` (which gets the cookie it is checked against)."""
    token = CSRF.search(client.get("/login").text)
    assert token is not None
    return token.group(1)


def login_client(client: TestClient, username: str, password: str) -> str:
    """Log ``client`` in through the login form; returns the CSRF token its forms carry."""
    response = client.post(
        "/login",
        data={
            "username": username,
            "password": password,
            "csrf_token": login_form_token(client),
            "next": "/",
        },
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    found = CSRF.search(client.get("/deployments").text)
    assert found is not None
    return found.group(1)


@dataclass
class Progress:
    """Records a task's progress as the agent would, through the workflow service."""

    stack: Stack

    def create(self, name: str, configuration: DeploymentConfiguration | None = None) -> int:
        """Create deployment ``name`` of the example driver as admin; returns its task's id."""
        with self.stack.session() as session:
            admin = auth.authenticate(session, self.stack.token_for("admin"))
            recorded = changes.create_deployment(
                session,
                by=admin,
                name=name,
                namespace="shop",
                driver_name="shop",
                driver_version="1.0.0",
                app_version=None,
                configuration=configuration or DeploymentConfiguration(),
            )
            assert recorded.task is not None
            return recorded.task.id

    def upgrade(self, name: str, app_version: str) -> int:
        with self.stack.session() as session:
            admin = auth.authenticate(session, self.stack.token_for("admin"))
            recorded = changes.upgrade_deployment(
                session, name, by=admin, app_version=app_version, driver_version=None
            )
            assert recorded.task is not None
            return recorded.task.id

    def start(self, task_id: int) -> None:
        with self.stack.session() as session:
            workflow.start_task(session, task_id)

    def step(self, task_id: int, name: str) -> int:
        with self.stack.session() as session:
            return workflow.add_step(session, task_id, name).id

    def end_step(self, step_id: int, error: str | None = None) -> None:
        with self.stack.session() as session:
            workflow.end_step(session, step_id, error=error)

    def note(self, step_id: int, note: str) -> None:
        with self.stack.session() as session:
            workflow.add_step_note(session, step_id, note)

    def output(self, step_id: int, tail: str, truncated: bool) -> None:
        with self.stack.session() as session:
            workflow.set_step_output(session, step_id, tail, truncated)

    def flow_run(self, step_id: int, flow_run_id: str) -> None:
        with self.stack.session() as session:
            workflow.set_step_flow_run(session, step_id, flow_run_id)

    def end(self, task_id: int, error: str | None = None, result: dict[str, Any] | None = None) -> None:
        """End the task as the agent does: what it applied becomes what runs, then the status follows."""
        with self.stack.session() as session:
            task = workflow.end_task(session, task_id, error=error, result=result)
            deployment_status.record_task_end(session, task)

    def finish_create(self, task_id: int) -> None:
        """Run a create task to success with its setup steps."""
        self.start(task_id)
        for name in ("Install the chart", hook_step_name(Hook.SETUP, Mode.POST)):
            self.end_step(self.step(task_id, name))
        self.end(task_id, result={"applied": {"app_version": "1.0.0", "driver_version": "1.0.0"}})

    def started_by_action(self, name: str, step_id: int, components: list[str]) -> int:
        """Stop ``components`` as an action of hook step ``step_id`` does (the API's stop, linked)."""
        with self.stack.session() as session:
            task_of_step = session.get(StepRow, step_id).task_id
        _, token = self.stack.actions_token(task_id=task_of_step)
        response = self.stack.client.post(
            f"/api/v1/deployments/{name}/stop",
            json={"components": components, "started_by_step": step_id},
            headers={"Authorization": f"Bearer {token}"},
        )
        assert response.status_code == 202, response.text
        task_id: int = response.json()["task"]["id"]
        return task_id

    def failed_upgrade(
        self, name: str, app_version: str, output: str, truncated: bool = True
    ) -> tuple[int, int]:
        """An upgrade whose hook stopped a component, then failed its migration; returns (task, child)."""
        task_id = self.upgrade(name, app_version)
        self.start(task_id)
        self.end_step(self.step(task_id, hook_step_name(Hook.UPGRADE, Mode.PRE)))
        hook = self.step(task_id, hook_step_name(Hook.UPGRADE, Mode.CORE))
        self.flow_run(hook, "0b5c2a8e-7f3c-4a61-9d2e-3f1c5e7a9b10")
        child = self.started_by_action(name, hook, ["task-worker"])
        self.start(child)
        self.end_step(self.step(child, "Stop components"))
        self.end(child)
        self.note(hook, f"Deleted Job {name}-migrate-7f3c of an earlier action, which had ended.")
        self.output(hook, output, truncated)
        self.end_step(
            hook, error="Command infrahub db migrate failed with exit code 3 in Job shop-migrate-91aa."
        )
        self.end(task_id, error="Step Run the upgrade hook failed.")
        return task_id, child


def make_user(stack: Stack, username: str, role: Role) -> None:
    with stack.session() as session:
        users.create_user(session, username, role, USER_PASSWORD)


@pytest.fixture
def web(engine: Engine, tmp_path: Path) -> Iterator[Stack]:
    """The app (API and UI) on a fresh database with the example driver stored, on both engines."""
    stack = make_stack(engine, tmp_path / "data")
    stack.add_driver("1.0.0")
    stack.add_driver("1.1.0")
    with stack.client:
        yield stack


@dataclass
class LiveServer:
    """The server on loopback, its stack for arranging data, and its URL."""

    stack: Stack
    url: str
    progress: Progress


@pytest.fixture(scope="module")
def live_server(
    migrated_templates: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """One server per test module on a SQLite database, served by uvicorn in a thread."""
    folder = tmp_path_factory.mktemp("web")
    url, _ = fresh_database_url("sqlite", migrated_templates, folder)
    engine = make_engine(url)
    stack = make_stack(engine, folder / "data")
    stack.add_driver("1.0.0")
    stack.add_driver("1.1.0")
    make_user(stack, "reader", Role.READ_ONLY)
    make_user(stack, "operator", Role.READ_WRITE)
    with served(stack.client.app) as url:
        yield LiveServer(stack, url, Progress(stack))
    engine.dispose()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by Playwright (never a downloaded browser)."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium) "
            "or point STYRMIN_CHROMIUM at a Chromium binary."
        )
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def site_url(live_server: LiveServer) -> str:
    """The URL pages open; a module testing another server overrides this fixture."""
    return live_server.url


@pytest.fixture
def new_page(browser: Any, site_url: str) -> Iterator[Any]:
    """A factory of pages in fresh browser contexts (own cookies), closed after the test."""
    contexts: list[Any] = []
    # Script errors and Content-Security-Policy violations show up in the console: there must be none.
    console_errors: list[str] = []

    def make(color_scheme: str = "light", width: int = 1280, height: int = 900) -> Any:
        context = browser.new_context(
            base_url=site_url,
            color_scheme=color_scheme,
            viewport={"width": width, "height": height},
        )
        context.set_default_timeout(10_000)
        contexts.append(context)
        page = context.new_page()
        page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda error: console_errors.append(str(error)))
        return page

    yield make
    for context in contexts:
        context.close()
    # Pages answered 401, 403 or 422 (a refused login or form, shown with its errors) are expected.
    expected = re.compile(r"^Failed to load resource: the server responded with a status of (401|403|422)\b")
    assert [e for e in console_errors if not expected.match(e)] == []


def log_in(page: Any, username: str, password: str = USER_PASSWORD) -> None:
    """Log in through the login page as a person would."""
    page.goto("/login")
    page.get_by_label("User name").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    page.wait_for_url(re.compile(r"/deployments$"))


def screenshot(page: Any, name: str) -> Path:
    """Save a full-page screenshot as a test artefact."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path
