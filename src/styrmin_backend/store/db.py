"""The database engine and sessions, for SQLite (embedded default) and PostgreSQL."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.orm import Session, SessionTransaction, sessionmaker

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.outages import DATABASE, Outage

log = logging.getLogger("styrmin.database")

_Row = TypeVar("_Row")

_CONNECT_TIMEOUT_SECONDS = 10

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
    else:
        # No pre-ping: it costs a round trip per request; recycle connections instead.
        # A database host that does not answer at all (a network partition) fails a connection in
        # 10 s, so the request gets its 503 then rather than waiting on TCP's own timeout.
        engine = create_engine(
            url,
            pool_size=10,
            max_overflow=20,
            pool_recycle=1800,
            pool_timeout=wait_seconds,
            connect_args={"connect_timeout": _CONNECT_TIMEOUT_SECONDS},
        )
    _watch_outages(engine)
    return engine


_UNAVAILABLE = (
    sa_exc.OperationalError,
    sa_exc.InterfaceError,
    sa_exc.DisconnectionError,
    sa_exc.TimeoutError,
)


def database_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database cannot be reached or cannot serve now (not the request's
    fault, nor a bug): a refused or lost connection, a database shutting down, no free connection."""
    if isinstance(error, _UNAVAILABLE):
        return True
    return isinstance(error, sa_exc.DBAPIError) and bool(error.connection_invalidated)


_SAME_OUTAGE = timedelta(seconds=10)
"""Failures this close to the last one belong to the same outage."""


class DatabaseOutages:
    """What one server saw of its database's outages: when the current or last one began and when
    its last failure was. Each server process keeps its own (no database to keep it in, then)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._since: datetime | None = None
        self._until: datetime | None = None
        self._away = False

    def record_failure(self, at: datetime | None = None) -> bool:
        """Note a call that the database could not serve (now, or ``at``); returns whether an
        outage began with it."""
        now = at or utcnow()
        with self._lock:
            # Stale pooled connections still fail for a moment after a reconnect: the same outage.
            fresh = self._until is None or now - self._until > _SAME_OUTAGE
            began = self._since is None or (not self._away and fresh)
            if began:
                self._since = now
            self._away, self._until = True, now
        return began

    def record_connected(self) -> None:
        """Note a new connection to the database: an outage in course is over."""
        if self._away:
            with self._lock:
                self._away = False

    def clear(self) -> None:
        """Forget every outage seen (a test's, once it is over)."""
        with self._lock:
            self._since = self._until = None
            self._away = False

    @property
    def away(self) -> bool:
        """Whether the last thing seen of the database was a failure."""
        return self._away

    def last(self) -> Outage | None:
        """The current or last outage (its ``until`` is its latest failure), or None if none was seen."""
        with self._lock:
            if self._since is None or self._until is None:
                return None
            return Outage(DATABASE, self._since, self._until)


_outages: weakref.WeakKeyDictionary[Engine, DatabaseOutages] = weakref.WeakKeyDictionary()


def outages_of(engine: Engine) -> DatabaseOutages:
    """The outages seen through ``engine`` (empty for an engine that :func:`make_engine` did not make)."""
    if engine not in _outages:
        _outages[engine] = DatabaseOutages()
    return _outages[engine]


def driver_message(error: BaseException) -> str:
    """The database driver's own words for ``error`` ("database is locked", "connection refused"),
    for the server's log: never SQLAlchemy's text, which quotes the statement and its parameters."""
    cause = getattr(error, "orig", None) or error
    first = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {first[0]}" if first else type(cause).__name__


def _watch_outages(engine: Engine) -> None:
    outages = outages_of(engine)

    def on_error(context: ExceptionContext) -> None:
        error = context.sqlalchemy_exception or context.original_exception
        if (context.is_disconnect or database_unavailable(error)) and outages.record_failure():
            # Once per outage: what the driver said ("database is locked", "connection refused").
            log.warning(
                "The database could not serve a request (%s); requests answer 503 while it cannot.",
                driver_message(context.original_exception),
            )

    event.listen(engine, "handle_error", on_error)
    event.listen(engine, "connect", lambda _connection, _record: outages.record_connected())


def _configure_sqlite(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


_LOCKED_ROWS = "styrmin.locked_rows"
"""``Session.info`` key of the rows :func:`read_for_update` locked in the session's transaction."""


def insert_unless_present(session: Session, model: type[Any], keys: list[str], **values: Any) -> bool:
    """Insert a row of ``model`` unless one with the same ``keys`` (its primary key or a unique
    index) exists, in one statement on PostgreSQL and SQLite alike (``ON CONFLICT DO NOTHING``):
    of two transactions racing to insert it, exactly one does. Whether this one did."""
    insert = postgresql_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
    statement = insert(model).values(**values).on_conflict_do_nothing(index_elements=keys)
    return bool(session.execute(statement).rowcount == 1)  # type: ignore[attr-defined]


def read_for_update(session: Session, model: type[_Row], key: Any) -> _Row | None:
    """The row of ``model`` with primary key ``key``, locked until the session's transaction ends.

    For a service that decides from a row and then writes it (a task's end, a cancel, a step's
    start): what it decides on is the row as it stays until the commit. The row is read again even
    when the session loaded it earlier (``populate_existing``: a plain ``get`` with a lock keeps the
    values it loaded before). PostgreSQL locks the row (``FOR UPDATE``). SQLite has no row locks and
    its Python driver begins a transaction only at the first write, so the read would lock nothing:
    there it takes the database's write lock first (``BEGIN IMMEDIATE``), unless a write of this
    transaction took it already.

    A row this transaction locked already is answered from the session without a query: while the
    lock holds, only this transaction can change it (a task's end reads its task for update in three
    services, and sent the same SELECT three times).
    """
    locked: set[tuple[type[Any], Any]] = session.info.setdefault(_LOCKED_ROWS, set())
    if (model, key) in locked:
        return session.get(model, key)
    hold_the_write_lock(session)
    row = session.get(model, key, with_for_update=True, populate_existing=True)
    if row is not None:
        locked.add((model, key))
    return row


def hold_the_write_lock(session: Session) -> None:
    """On SQLite, begin the session's transaction holding the database's write lock (``BEGIN
    IMMEDIATE``), unless a transaction runs already; nothing on PostgreSQL.

    Call it before a transaction that reads and then writes without a write first, and before a
    savepoint, which SQLite would otherwise begin deferred: such a transaction reads a snapshot, and
    when another connection commits a write before it writes, SQLite refuses its write at once with
    "database is locked" (its busy timeout never applies). Holding the lock from the start, it waits
    its turn instead.
    """
    connection = session.connection()
    if connection.dialect.name == "sqlite":
        dbapi_connection = connection.connection.dbapi_connection
        if dbapi_connection is not None and not dbapi_connection.in_transaction:
            connection.exec_driver_sql("BEGIN IMMEDIATE")


@event.listens_for(Session, "after_transaction_end")
def _forget_locked_rows(session: Session, transaction: SessionTransaction) -> None:
    """A transaction's end (a savepoint's too) lets go of its locks: the next read locks again.

    Not a flush's: each flush runs in a subtransaction of its own, which ends with the flush.
    """
    if transaction.parent is None or transaction.nested:
        session.info.pop(_LOCKED_ROWS, None)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions bound to ``engine`` that keep loaded objects usable after commit."""
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def transaction(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session whose work is committed on success and rolled back on any error."""
    with factory() as session, session.begin():
        yield session
