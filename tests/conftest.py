"""Shared fixtures: a freshly migrated database per test (SQLite and the real PostgreSQL), and the one
whole stack of a test worker."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest
import yaml
from argon2 import PasswordHasher
from sqlalchemy import Engine

from styrmin_backend.services import secrets as password_secrets
from styrmin_backend.store.db import make_engine
from styrmin_backend.store.migrate import upgrade_database
from tests.support.databases import ReusedPostgresDatabase
from tests.support.drivers import EXAMPLE_DRIVER

if TYPE_CHECKING:
    from styrmin_backend.testing import StyrminStack

POSTGRES_DSN = os.environ.get("STYRMIN_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
DB_ENGINES = ("sqlite", "postgresql")


@pytest.fixture(scope="session", autouse=True)
def _cheap_password_hashing() -> Iterator[None]:
    """Argon2 with its cheapest cost in the test processes: 0.7 ms a hash instead of 175 ms of CPU.

    Tests log in and make users thousands of times, and the real cost was most of the fast loop's
    time (the 40 failed logins of a throttle test alone took 7 s of CPU). Passwords still hash and
    verify with argon2id; the processes the tests start (``styrmin up``, ``styrmin server``) keep the
    real cost.
    """
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            password_secrets, "_hasher", PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
        )
        yield


LONGEST_FIRST = (
    "tests/production/test_install.py",
    # Three whole stacks of its own, one after the other (268 s alone on 2026-12-04): queued in
    # collection order it started among the last files and kept its worker going after the other.
    "tests/production/test_outages.py",
    "tests/test_styrmin_up.py",
    "tests/web/test_browser_end_to_end.py",
    "tests/agent/test_resilience.py",
    "tests/actions/test_backups.py",
    "tests/api/test_schemathesis.py",
    "tests/agent/test_workflows.py",
    "tests/actions/test_seed_example.py",
    "tests/agent_prefect/test_action_runner.py",
    "tests/web/test_forms.py",
    "tests/api/test_drivers_registry.py",
    "tests/api/test_agent_load.py",
    "tests/agent/test_agent_restart.py",
    "tests/production/test_prefect_on_postgresql.py",
    "tests/api/test_agent_protocol.py",
    "tests/api/test_auth.py",
    # The longest of the fast loop after those (its --durations on 2026-12-01): the last files
    # to start are short ones, so no worker waits long for the other at the end.
    "tests/sdk/test_client.py",
    "tests/api/test_claim_wait.py",
    "tests/localcluster/test_workloads.py",
    "tests/cli/test_process.py",
    "tests/api/test_role_matrix.py",
    "tests/cli/test_tasks.py",
    "tests/web/test_backups_page.py",
)
"""The test files that keep a worker busy longest, longest first (from ``--durations`` of the whole
suite on the 2-core machine, whole-stack start-up included). ./scripts/test hands files to its two
workers in collection order (``--dist loadfile --no-loadscope-reorder``): started first, the long
files end while short ones fill in, and neither worker sits idle at the end waiting for the other."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the files of ``LONGEST_FIRST`` first, in that order; the rest follow in their usual order."""
    rank = {path: position for position, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def _pg_admin() -> psycopg.Connection:
    return psycopg.connect(POSTGRES_DSN, autocommit=True)


def _pg_url(database: str) -> str:
    params = dict(part.split("=", 1) for part in POSTGRES_DSN.split())
    return (
        f"postgresql+psycopg://{params.get('user', 'postgres')}@{params.get('host', '127.0.0.1')}:"
        f"{params.get('port', '5432')}/{database}"
    )


@pytest.fixture(scope="session")
def migrated_templates(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """One migrated database per engine, copied for each test (fast, and every test starts clean)."""
    sqlite_file = tmp_path_factory.mktemp("template") / "template.db"
    engine = make_engine(f"sqlite:///{sqlite_file}")
    upgrade_database(engine)
    with engine.connect() as connection:
        connection.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)")
    engine.dispose()
    template = f"styrmin_tpl_{uuid.uuid4().hex[:10]}"
    with _pg_admin() as admin:
        admin.execute(f'CREATE DATABASE "{template}"')
    engine = make_engine(_pg_url(template))
    upgrade_database(engine)
    engine.dispose()
    yield {"sqlite": str(sqlite_file), "postgresql": template}
    with _pg_admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')


def fresh_database_url(kind: str, templates: dict[str, str], tmp_path: Path) -> tuple[str, str | None]:
    """A new migrated database of ``kind``; returns its URL and, for PostgreSQL, its name to drop."""
    if kind == "sqlite":
        target = tmp_path / "styrmin.db"
        shutil.copyfile(templates["sqlite"], target)
        return f"sqlite:///{target}", None
    name = f"styrmin_t_{uuid.uuid4().hex[:12]}"
    with _pg_admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{templates["postgresql"]}"')
    return _pg_url(name), name


@pytest.fixture(scope="session")
def _postgres_of_this_worker(migrated_templates: dict[str, str]) -> Iterator[ReusedPostgresDatabase]:
    """The PostgreSQL database the tests of this worker get in turn, each in the template's state."""
    database = ReusedPostgresDatabase(
        _pg_admin, lambda name: f"{POSTGRES_DSN} dbname={name}", migrated_templates["postgresql"]
    )
    yield database
    database.close()


@pytest.fixture(params=DB_ENGINES)
def database_url(
    request: pytest.FixtureRequest, migrated_templates: dict[str, str], tmp_path: Path
) -> Iterator[str]:
    """The URL of a freshly migrated database, once on SQLite and once on PostgreSQL.

    SQLite gets a copy of the template's file. PostgreSQL gets this worker's database emptied back to
    the template's state under a name no earlier test knew (tests/support/databases.py): as clean as a
    copy of the template, without its cost."""
    if request.param == "sqlite":
        url, _ = fresh_database_url("sqlite", migrated_templates, tmp_path)
        yield url
        return
    database: ReusedPostgresDatabase = request.getfixturevalue("_postgres_of_this_worker")
    yield _pg_url(database.fresh())
    database.put_away()


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on the test's fresh database."""
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


def _any_registry_catalog(folder: Path) -> Path:
    """A catalog naming the shop images without a registry host (``shop/server``), so that any registry
    (``registry.local:5000/shop/server:2.0.0``) runs the example app, as a private registry's image would."""
    app = EXAMPLE_DRIVER / "app"
    env = {"PATH": f"{app / 'bin'}:/usr/local/bin:/usr/bin:/bin", "SHOP_PYTHON": "{python}"}
    images = [
        {"name": f"shop/{name}", "entrypoint": ["{python}", str(app / "shop.py")], "cmd": [cmd], "env": env}
        for name, cmd in (("server", "serve"), ("task-worker", "work"))
    ]
    document = {"apiVersion": "localcluster.styrmin.io/v1", "kind": "ImageCatalog", "images": images}
    (folder / "any-registry.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return folder


@pytest.fixture(scope="session")
def whole_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StyrminStack]:
    """The one whole Styrmin of this test worker (server, local cluster, Prefect, agent), started on first use.

    tests/actions, tests/agent and the browser's end-to-end tests share it, so each test names its own
    deployments, and a driver version is pushed with the same content wherever it is used (a pushed
    version never changes): the example driver as it is at 1.0.0, test drivers at versions of their own.
    The agent reports workloads every second (the agent tests watch them follow the cluster), and stops
    running actions 1 s after the Prefect server stops answering (tests/agent/test_resilience.py kills it;
    ``styrmin up``'s stack starts it again).
    """
    from styrmin_backend.testing import StyrminStack

    catalogs = [EXAMPLE_DRIVER / "catalog", _any_registry_catalog(tmp_path_factory.mktemp("catalog"))]
    options = {
        "lease_seconds": 30,
        "status_seconds": 1,
        "prefect_check_seconds": 0.5,
        "prefect_outage_seconds": 1,
    }
    with StyrminStack.start(tmp_path_factory.mktemp("styrmin"), catalogs, agent_options=options) as stack:
        yield stack
