"""The PostgreSQL database a test worker reuses hands each test the migrated template's state, like a copy.

The tests' isolation rests on it (tests/support/databases.py): no row, id or connection of one test
may reach the next, and a test that changes the schema must not change it for the others.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tests.conftest import POSTGRES_DSN, _pg_admin
from tests.support.databases import ReusedPostgresDatabase


def _connect(name: str) -> psycopg.Connection[Any]:
    return psycopg.connect(f"{POSTGRES_DSN} dbname={name}", autocommit=True)


def _contents(name: str) -> dict[str, Any]:
    """What a test could see: the rows of users and drivers, and the next id each table would get."""
    with _connect(name) as connection:
        users = connection.execute("SELECT id, username, role, created_at FROM users ORDER BY id").fetchall()
        drivers = connection.execute("SELECT count(*) FROM drivers").fetchall()
        version = connection.execute("SELECT version_num FROM alembic_version").fetchall()
        with connection.transaction(force_rollback=True):
            next_user = connection.execute(
                "INSERT INTO users (username, role, is_active, is_builtin, created_at)"
                " VALUES ('probe', 'admin', true, false, now()) RETURNING id"
            ).fetchall()
    return {"users": users, "drivers": drivers, "version": version, "next user id": next_user}


@pytest.fixture
def reused(migrated_templates: dict[str, str]) -> Iterator[ReusedPostgresDatabase]:
    database = ReusedPostgresDatabase(
        _pg_admin, lambda name: f"{POSTGRES_DSN} dbname={name}", migrated_templates["postgresql"]
    )
    yield database
    database.close()


def test_each_test_gets_the_templates_rows_and_ids_and_no_connection_of_the_one_before(
    reused: ReusedPostgresDatabase, migrated_templates: dict[str, str]
) -> None:
    template = _contents(migrated_templates["postgresql"])
    first = reused.fresh()
    assert _contents(first) == template

    left_behind = _connect(first)  # a pool, a server or a LISTEN connection the test did not close
    left_behind.execute(
        "INSERT INTO users (username, role, is_active, is_builtin, created_at)"
        " VALUES ('someone', 'admin', true, false, now())"
    )
    left_behind.execute("SELECT nextval('drivers_id_seq')")
    left_behind.execute("LISTEN styrmin_task_claimable")
    reused.put_away()
    second = reused.fresh()

    assert second != first, "the next test's database has a name the test before could reach"
    assert _contents(second) == template
    with pytest.raises(psycopg.OperationalError):
        left_behind.execute("SELECT 1")
    with pytest.raises(psycopg.OperationalError):
        _connect(first)


def test_a_test_that_changes_the_schema_leaves_the_next_one_a_copy_of_the_template(
    reused: ReusedPostgresDatabase, migrated_templates: dict[str, str]
) -> None:
    name = reused.fresh()
    with _connect(name) as connection:
        connection.execute("ALTER TABLE drivers ADD COLUMN extra integer")
        connection.execute("CREATE TABLE leftover (x integer)")
    reused.put_away()
    with _connect(reused.fresh()) as connection:
        columns = connection.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = 'drivers'"
        ).fetchall()
        tables = connection.execute("SELECT tablename FROM pg_tables WHERE tablename = 'leftover'").fetchall()
    assert ("extra",) not in columns
    assert tables == []
    assert _contents(reused.name) == _contents(migrated_templates["postgresql"])
