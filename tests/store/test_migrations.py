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
from tests.support.processes import python_prints

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
    assert python_prints(check).split() == ["True", "False"]


def test_models_match_the_migrations(empty_database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    engine = make_engine(empty_database_url)
    upgrade_database(engine)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    engine.dispose()
    assert differences == [], "add a migration for the model change"


def test_the_latest_tasks_migration_finds_each_deployments_newest_requested_task(
    empty_database_url: str,
) -> None:
    """Tasks recorded before ``latest_tasks`` existed decide the statuses after the migration, as
    they did before: the newest requested task of each type, never an action's linked one. So do
    tasks recorded after it by any server, whichever version (a trigger keeps the table)."""
    from datetime import UTC, datetime

    from alembic import command
    from sqlalchemy import text

    from styrmin_backend.domain.tasks import TaskType
    from styrmin_backend.services.deployment_status import latest_changes
    from styrmin_backend.store.migrate import _config

    engine = make_engine(empty_database_url)
    with engine.begin() as connection:
        config = _config()
        config.attributes["connection"] = connection
        command.upgrade(config, "0008_helm_locks_and_cancel")
    now = datetime.now(UTC)
    with engine.begin() as connection:
        for name in ("shop", "blog"):
            connection.execute(
                text(
                    "INSERT INTO deployments (name, namespace, cluster, driver_name, driver_version, "
                    "app_version, configuration, stopped_components, status, last_revision, created_at, "
                    "updated_at) VALUES (:name, :name, 'local', 'shop', '1.0.0', '1.0.0', '{}', '[]', "
                    "'running', 0, :now, :now)"
                ),
                {"name": name, "now": now},
            )
        shop, blog = (
            connection.execute(text("SELECT id FROM deployments WHERE name = :n"), {"n": n}).scalar_one()
            for n in ("shop", "blog")
        )
        tasks = [  # (id, deployment, type, parent): 3 and 5 are an action's linked tasks
            (1, shop, "create", None),
            (2, shop, "upgrade", None),
            (3, shop, "stop", 2),
            (4, shop, "stop", None),
            (5, shop, "stop", 4),
            (6, blog, "create", None),
        ]
        for task_id, deployment, type_, parent in tasks:
            connection.execute(
                text(
                    "INSERT INTO tasks (id, type, status, deployment_id, deployment_name, requested_by, "
                    "created_at, parent_task_id, cluster) VALUES (:id, :type, 'succeeded', :deployment, "
                    "'d', 'admin', :now, :parent, 'local')"
                ),
                {"id": task_id, "type": type_, "deployment": deployment, "parent": parent, "now": now},
            )
    upgrade_database(engine)
    with make_session_factory(engine)() as session:
        latest = latest_changes(session, [shop, blog])
    found = {d: {t: change.task_id for t, change in of.items()} for d, of in latest.items()}
    assert found == {
        shop: {TaskType.CREATE: 1, TaskType.UPGRADE: 2, TaskType.STOP: 4},
        blog: {TaskType.CREATE: 6},
    }

    # After the migration, a server of the previous version (a rolling upgrade) still inserts tasks
    # as it always did: they count as well, the newest one of each type winning.
    with engine.begin() as connection:
        for task_id, deployment, type_, parent in [
            (9, shop, "upgrade", None),
            (10, shop, "upgrade", 9),
            (8, shop, "upgrade", None),
            (11, blog, "stop", None),
        ]:
            connection.execute(
                text(
                    "INSERT INTO tasks (id, type, status, deployment_id, deployment_name, requested_by, "
                    "created_at, parent_task_id, cluster) VALUES (:id, :type, 'pending', :deployment, "
                    "'d', 'admin', :now, :parent, 'local')"
                ),
                {"id": task_id, "type": type_, "deployment": deployment, "parent": parent, "now": now},
            )
    with make_session_factory(engine)() as session:
        latest = latest_changes(session, [shop, blog])
    engine.dispose()
    found = {d: {t: change.task_id for t, change in of.items()} for d, of in latest.items()}
    assert found == {
        shop: {TaskType.CREATE: 1, TaskType.UPGRADE: 9, TaskType.STOP: 4},
        blog: {TaskType.CREATE: 6, TaskType.STOP: 11},
    }
