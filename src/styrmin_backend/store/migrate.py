"""Applying the database migrations.

Alembic is imported only to migrate: a server whose database is current never loads it (with Mako and
Pygments' lexers, which Alembic's script loading pulls in, about 13 MB of a server's memory). Whether
the database is current is one read of ``alembic_version`` beside ``HEAD_REVISION``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Final

from sqlalchemy import Engine, inspect, text

if TYPE_CHECKING:
    from alembic.config import Config

_MIGRATIONS = Path(__file__).parent / "migrations"

HEAD_REVISION: Final = "0012_agent_instances_seen"
"""The newest migration in ``migrations/versions``: set it to the ``revision`` of each new migration
(``tests/store/test_migrations.py`` checks it against Alembic's reading of the files)."""


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_MIGRATIONS))
    return config


_MIGRATION_LOCK_ID = 0x5759524D  # "STYRM": one PostgreSQL advisory lock for every Styrmin server


@contextmanager
def migration_lock(engine: Engine) -> Iterator[None]:
    """Hold, on PostgreSQL, the lock that lets one server at a time migrate and make the first admin.

    Several replicas starting at once (and the chart's migration Job) then take turns; the later ones
    find the schema current. SQLite serves one server only and needs no lock.
    """
    if engine.dialect.name != "postgresql":
        yield
        return
    with engine.connect() as connection:
        connection.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _MIGRATION_LOCK_ID})
        connection.commit()
        try:
            yield
        finally:
            connection.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _MIGRATION_LOCK_ID})
            connection.commit()


def upgrade_database(engine: Engine) -> None:
    """Bring the database of ``engine`` to the newest schema (nothing to do when it is current)."""
    if database_is_current(engine):
        return
    from alembic import command

    with engine.begin() as connection:
        config = _config()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def database_is_current(engine: Engine) -> bool:
    """Whether the database of ``engine`` has every migration applied."""
    with engine.connect() as connection:
        if not inspect(connection).has_table("alembic_version"):  # never migrated
            return False
        revisions = connection.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return revisions == [HEAD_REVISION]
