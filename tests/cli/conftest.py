"""styrminctl against a real server on loopback (SQLite), run in-process with Typer's CliRunner."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from styrmin import Client
from styrmin.cli import app
from tests.conftest import fresh_database_url
from tests.sdk.server import LiveServer, serve, unique, write_driver


@pytest.fixture(scope="session")
def live_server(
    migrated_templates: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    """A Styrmin server with the demo driver 1.0.0 and 2.0.0 pushed."""
    root = tmp_path_factory.mktemp("cli")
    url, _ = fresh_database_url("sqlite", migrated_templates, root)
    with serve(url, root / "data", "sqlite") as server:
        with Client(server.url, server.admin_token()) as client:
            client.drivers.push(write_driver(root / "demo-1"))
            client.drivers.push(write_driver(root / "demo-2", version="2.0.0", app="2.0.0"))
        yield server


@dataclass
class Ctl:
    """Runs ``styrminctl ARGS`` against the live server, by default as admin through STYRMIN_URL/TOKEN."""

    server: LiveServer
    config: Path
    token: str

    def __call__(
        self,
        *args: str,
        input: str | None = None,
        env: dict[str, str | None] | None = None,
        auth: bool = True,
    ) -> Result:
        base: dict[str, str | None] = {
            "STYRMINCTL_CONFIG": str(self.config),
            "STYRMIN_URL": self.server.url if auth else None,
            "STYRMIN_TOKEN": self.token if auth else None,
            "STYRMINCTL_POLL_INTERVAL": "0.05",
            "COLUMNS": "200",
            "NO_COLOR": None,
            "FORCE_COLOR": None,
        }
        base.update(env or {})
        return CliRunner().invoke(app, list(args), input=input, env=base, catch_exceptions=False)

    def deployment(self) -> str:
        """A new deployment of demo 1.0.0 (its create task stays pending)."""
        name = unique("shop")
        result = self("deployments", "create", name, "--driver", "demo@1.0.0")
        assert result.exit_code == 0, result.output
        return name


@pytest.fixture
def ctl(live_server: LiveServer, tmp_path: Path) -> Ctl:
    return Ctl(
        server=live_server, config=tmp_path / "home" / "styrminctl.yaml", token=live_server.admin_token()
    )
