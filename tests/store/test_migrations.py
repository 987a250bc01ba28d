"""Migrations bring an empty database to the current schema, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from sqlalchemy import inspect, select

from styrmin_backend.domain.users import ACTIONS_USERNAME
from styrmin_backend.store.db import make_engine, make_session_factory
from styrmin_backend.store.migrate import database_is_current, upgrade_database
from styrmin_backend.store.models import Base, UserRow

from ..conftest import _pg_admin, _pg_url


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database_url(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    name = f"styrmin_empty_{uuid.uuid4().hex[:10]}"
    with _pg_admin() as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield _pg_url(name)
    with _pg_admin() as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_migrations_create_every_table_and_the_actions_user(empty_database_url: str) -> None:
    engine = make_engine(empty_database_url)
    assert not database_is_current(engine)
    upgrade_database(engine)
    assert database_is_current(engine)
    assert set(Base.metadata.tables) <= set(inspect(engine).get_table_names())
    with make_session_factory(engine)() as session:
        user = session.scalars(select(UserRow).where(UserRow.username == ACTIONS_USERNAME)).one()
    assert (user.role, user.password_hash, user.is_builtin, user.is_active) == (
        "read-write",
        None,
        True,
        True,
    )
    upgrade_database(engine)  # applying again changes nothing
    with make_session_factory(engine)() as session:
        assert len(session.scalars(select(UserRow)).all()) == 1
    engine.dispose()


def test_head_revision_names_the_newest_migration() -> None:
    from alembic.script import ScriptDirectory

    from styrmin_backend.store.migrate import HEAD_REVISION, _config

    head = ScriptDirectory.from_config(_config()).get_current_head()
    assert head == HEAD_REVISION, (
        f"store/migrate.py's HEAD_REVISION is {HEAD_REVISION!r} but the newest migration is {head!r}: "
        "set HEAD_REVISION to it"
    )


def test_a_current_database_is_served_without_loading_alembic(tmp_path: Path) -> None:
    """A server whose database is current never imports Alembic (nor Mako and Pygments with it)."""
    import subprocess
    import sys

    database = f"sqlite:///{tmp_path / 'current.db'}"
    engine = make_engine(database)
    upgrade_database(engine)
    engine.dispose()
    check = (
        "import sys\n"
        "from styrmin_backend.store.db import make_engine\n"
        "from styrmin_backend.store.migrate import database_is_current, upgrade_database\n"
        f"engine = make_engine({database!r})\n"
        "upgrade_database(engine)\n"
        "print(database_is_current(engine), 'alembic' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["True", "False"]


def test_models_match_the_migrations(empty_database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = make_engine(empty_database_url)
    upgrade_database(engine)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert differences == [], "add a migration for the model change"
