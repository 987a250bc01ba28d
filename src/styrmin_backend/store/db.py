"""The database engine and sessions, for SQLite (embedded default) and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

_SQLITE_CONNECTIONS = 48
"""At least the server's worker threads (anyio's default 40) plus the agent's own calls' threads."""


def make_engine(url: str, *, wait_seconds: float = 30.0) -> Engine:
    """An engine for ``url``; SQLite gets WAL, foreign keys and a busy timeout.

    ``wait_seconds`` bounds how long a request waits for the database (SQLite's write lock, a free
    connection of the pool) before it fails; tests of behaviour under load set it shorter.
    """
    if url.startswith("sqlite"):
        # A connection per worker thread (the server runs up to 40 requests at once): SQLite
        # connections are cheap, and with fewer, requests queued 30 s for one and failed with 500
        # under load (lease renewals among them, ending healthy tasks as "the agent stopped").
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": wait_seconds},
            pool_size=_SQLITE_CONNECTIONS,
            max_overflow=0,
            pool_timeout=2 * wait_seconds,
        )
        event.listen(engine, "connect", _configure_sqlite)
        return engine
    # No pre-ping: it costs a round trip per request; recycle connections instead.
    return create_engine(url, pool_size=10, max_overflow=20, pool_recycle=1800, pool_timeout=wait_seconds)


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine`` that keep loaded objects usable after commit."""
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed on success and rolled back on any error."""
    with factory() as session, session.begin():
        yield session
