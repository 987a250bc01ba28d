"""A real Styrmin app on a fresh database, and users of every role to call it as."""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from pydantic import SecretStr
from sqlalchemy import Engine

from styrmin_backend.domain.roles import Role
from styrmin_backend.drivers import DriverPackage, DriverReport, read_driver
from styrmin_backend.server_app import create_app
from styrmin_backend.services import auth, drivers, users
from styrmin_backend.services.users import ensure_admin
from styrmin_backend.settings import Settings
from styrmin_backend.store.db import make_session_factory, transaction
from tests.support.drivers import driver_folder

ADMIN_PASSWORD = "admin-password-for-tests"
USER_PASSWORD = "a-long-password"


@dataclass
class Stack:
    """The app under test, its database, and helpers to act as a given user."""

    client: TestClient
    engine: Engine
    settings: Settings

    def session(self) -> Any:
        return transaction(make_session_factory(self.engine))

    def login(self, username: str, password: str) -> str:
        response = self.client.post("/api/v1/auth/login", json={"username": username, "password": password})
        assert response.status_code == 201, response.text
        token: str = response.json()["token"]
        return token

    def headers(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}

    def make_user(self, username: str, role: Role) -> str:
        """Create ``username`` with ``role`` through the API and return a token of theirs."""
        admin = self.login("admin", ADMIN_PASSWORD)
        response = self.client.post(
            "/api/v1/users",
            json={"username": username, "role": role.value, "password": USER_PASSWORD},
            headers=self.headers(admin),
        )
        assert response.status_code == 201, response.text
        return self.login(username, USER_PASSWORD)

    def token_for(self, username: str) -> str:
        """A fresh API token of ``username``, made without a password login (fast)."""
        with self.session() as session:
            user = users.get_user(session, username)
            return auth.issue_token(session, user, auth.TokenKind.API, timedelta(hours=1)).token

    def actions_token(
        self, lifetime: timedelta = timedelta(minutes=10), task_id: int | None = None
    ) -> tuple[int, str]:
        """A styrmin-actions token as the reconciliation of ``task_id`` gets it (through the internal service)."""
        with self.session() as session:
            issued = auth.mint_actions_token(session, lifetime, task_id)
        return issued.id, issued.token

    def add_driver(self, version: str = "1.0.0") -> None:
        """Store the example driver (without actions) at ``version``, skipping validation for speed."""
        with self.session() as session:
            drivers.push_driver(session, _example_driver(version), DriverReport(), pushed_by="admin")


@functools.cache
def _example_driver(version: str) -> DriverPackage:
    """The example driver without its actions at ``version``, read once a process (tests store it often)."""
    with tempfile.TemporaryDirectory() as scratch:
        return read_driver(driver_folder(Path(scratch) / "shop", version=version))


def make_stack(engine: Engine, data_dir: Path) -> Stack:
    settings = Settings(data_dir=data_dir, admin_password=SecretStr(ADMIN_PASSWORD))
    with transaction(make_session_factory(engine)) as session:
        ensure_admin(session, ADMIN_PASSWORD, data_dir)
    client = TestClient(create_app(settings, engine), raise_server_exceptions=False)
    return Stack(client=client, engine=engine, settings=settings)


@pytest.fixture
def stack(engine: Engine, tmp_path: Path) -> Iterator[Stack]:
    """The API on a fresh database with the admin made, on SQLite and PostgreSQL."""
    stack = make_stack(engine, tmp_path / "data")
    with stack.client:
        yield stack


@pytest.fixture
def shop_admin(stack: Stack) -> dict[str, str]:
    """The headers of an admin's token, once the example driver is stored and deployment "shop" of it
    is created (its create task pending)."""
    stack.add_driver()
    headers = stack.headers(stack.token_for("admin"))
    created = stack.client.post(
        "/api/v1/deployments",
        json={"name": "shop", "namespace": "shop", "driver": "shop", "driver_version": "1.0.0"},
        headers=headers,
    )
    assert created.status_code == 202, created.text
    return headers


def configure_shop_in_the_page(stack: Stack, values: str) -> httpx.Response:
    """The configure page's answer to the admin's form setting deployment "shop"'s values to ``values``
    (YAML), as a browser posts it."""
    from tests.web.conftest import login_client

    csrf = login_client(stack.client, "admin", ADMIN_PASSWORD)
    return stack.client.post(
        "/deployments/shop/configure", data={"values": values, "csrf_token": csrf}, follow_redirects=False
    )
