"""Several servers starting at once on one new PostgreSQL database: one migrates and makes the admin,
the others find it done (as the chart's replicas and its migration Job do)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from pydantic import SecretStr
from sqlalchemy import func, select

from styrmin_backend.bootstrap import Prepared, prepare_database
from styrmin_backend.settings import Settings
from styrmin_backend.store.migrate import database_is_current
from styrmin_backend.store.models import UserRow
from tests.conftest import _pg_admin, _pg_url


@pytest.fixture
def empty_postgres() -> Iterator[str]:
    name = f"styrmin_t_{uuid.uuid4().hex[:12]}"
    with _pg_admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield _pg_url(name)
    with _pg_admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_four_servers_starting_together_migrate_once_and_make_one_admin(
    empty_postgres: str, tmp_path: Path
) -> None:
    def start(index: int) -> Prepared:
        settings = Settings(
            database_url=empty_postgres,
            data_dir=tmp_path / f"server-{index}",
            admin_password=SecretStr("a-password-from-a-secret"),
            secret_key=SecretStr(key),
        )
        return prepare_database(settings)

    key = Fernet.generate_key().decode()

    with ThreadPoolExecutor(4) as pool:
        prepared = list(pool.map(start, range(4)))
    assert sum(1 for p in prepared if p.first_admin is not None) == 1
    engine = prepared[0].engine
    assert database_is_current(engine)
    with engine.connect() as connection:
        admins = connection.execute(select(func.count()).where(UserRow.username == "admin")).scalar_one()
    assert admins == 1
    for p in prepared:
        p.engine.dispose()
