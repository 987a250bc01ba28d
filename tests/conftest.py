"""Shared fixtures: a freshly migrated database per test, on SQLite and on the real PostgreSQL."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from styrmin_backend.store.db import make_engine
from styrmin_backend.store.migrate import upgrade_database

POSTGRES_DSN = os.environ.get("STYRMIN_TEST_POSTGRES", "host=127.0.0.1 port=5432 user=postgres dbname=test")
DB_ENGINES = ("sqlite", "postgresql")


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


@pytest.fixture(params=DB_ENGINES)
def database_url(
    request: pytest.FixtureRequest, migrated_templates: dict[str, str], tmp_path: Path
) -> Iterator[str]:
    """The URL of a freshly migrated database, once on SQLite and once on PostgreSQL."""
    url, to_drop = fresh_database_url(request.param, migrated_templates, tmp_path)
    yield url
    if to_drop:
        with _pg_admin() as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{to_drop}" WITH (FORCE)')


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on the test's fresh database."""
    engine = make_engine(database_url)
    yield engine
    engine.dispose()
