"""The Prefect server on PostgreSQL, as in production: the agent's actions run on it as flow runs."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from styrmin_backend.agent.prefect import ActionRunner, LocalPrefectServer
from tests.agent_prefect.conftest import driver_dir  # noqa: F401  (a fixture)
from tests.agent_prefect.test_action_runner import _flow_run, _log_messages, _run
from tests.conftest import _pg_admin, _pg_url

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def prefect_on_postgresql(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalPrefectServer]:
    name = f"prefect_t_{uuid.uuid4().hex[:12]}"
    with _pg_admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = _pg_url(name).replace("postgresql+psycopg://", "postgresql+asyncpg://")
    server = LocalPrefectServer(tmp_path_factory.mktemp("prefect-pg"), database_url=url)
    server.start(timeout=600)  # a new database is migrated first; generous on a loaded machine
    yield server
    server.stop()
    with _pg_admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def pg_runner(prefect_on_postgresql: LocalPrefectServer) -> AsyncIterator[ActionRunner]:
    async with ActionRunner(prefect_on_postgresql.api_url, pool_size=1) as runner:
        await runner.wait_until_ready()
        yield runner


@pytest.mark.asyncio(loop_scope="session")
async def test_an_action_runs_on_a_prefect_server_backed_by_postgresql(
    prefect_on_postgresql: LocalPrefectServer,
    pg_runner: ActionRunner,
    driver_dir: Path,  # noqa: F811
) -> None:
    from prefect.client.orchestration import PrefectClient

    outcome = await _run(pg_runner, driver_dir, "upgrade", target_version="2.0.0")
    assert outcome.succeeded, outcome.error
    assert not (prefect_on_postgresql.data_dir / "prefect.db").exists()  # nothing went to SQLite
    client: Any
    async with PrefectClient(prefect_on_postgresql.api_url) as client:
        flow_run = await _flow_run(client, outcome.flow_run_id)
        assert flow_run.state.is_completed()
        assert "Upgrading shop to 2.0.0" in await _log_messages(client, outcome.flow_run_id)
