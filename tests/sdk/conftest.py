"""The SDK against a real server: one per database engine (SQLite and PostgreSQL) for the session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from styrmin import Client
from tests.conftest import DB_ENGINES, fresh_database_url

from .server import LiveServer, serve, write_driver


@pytest.fixture(scope="session", params=DB_ENGINES)
def live_server(
    request: pytest.FixtureRequest,
    migrated_templates: dict[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LiveServer]:
    """A Styrmin server on loopback with the demo driver 1.0.0 and 2.0.0 pushed."""
    kind = request.param
    root = tmp_path_factory.mktemp(f"sdk-{kind}")
    url, to_drop = fresh_database_url(kind, migrated_templates, root)
    with serve(url, root / "data", kind) as server:
        with Client(server.url, server.admin_token()) as client:
            client.drivers.push(write_driver(root / "demo-1"))
            client.drivers.push(write_driver(root / "demo-2", version="2.0.0", app="2.0.0"))
        yield server
    if to_drop:
        from tests.conftest import _pg_admin

        with _pg_admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{to_drop}" WITH (FORCE)')


@pytest.fixture
def admin(live_server: LiveServer) -> Iterator[Client]:
    """A client signed in as admin."""
    with Client(live_server.url, live_server.admin_token(), retries=0) as client:
        yield client


@pytest.fixture
def driver_dir(tmp_path: Path) -> Path:
    return write_driver(tmp_path / "driver")
