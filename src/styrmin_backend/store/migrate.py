"""Applying the database migrations."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

_MIGRATIONS = Path(__file__).parent / "migrations"


def _config() -> Config:
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
    """Bring the database of ``engine`` to the newest schema."""
    with engine.begin() as connection:
        config = _config()
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


@cache
def head_revision() -> str | None:
    """The newest migration of this Styrmin (read once: the files do not change while it runs)."""
    return ScriptDirectory.from_config(_config()).get_current_head()


def database_is_current(engine: Engine) -> bool:
    """Whether the database of ``engine`` has every migration applied."""
    with engine.connect() as connection:
        # Quietly: MigrationContext logs two INFO lines each time, and readiness probes call this often.
        logger = logging.getLogger("alembic.runtime.migration")
        level = logger.level
        logger.setLevel(logging.WARNING)
        try:
            return MigrationContext.configure(connection).get_current_revision() == head_revision()
        finally:
            logger.setLevel(level)
