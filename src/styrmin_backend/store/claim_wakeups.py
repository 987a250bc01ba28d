"""Waking the agents' waiting claims when a task becomes claimable: LISTEN/NOTIFY on PostgreSQL.

Inserting a pending task sends ``NOTIFY styrmin_task_claimable, '<cluster>'`` in the same transaction,
so PostgreSQL delivers it once the task is committed, to every server on the database. Each server
process holds one connection that LISTENs (started by the first waiting claim) and wakes the claims
of that cluster waiting in the process. On SQLite, and while that connection is down, a waiting
claim looks again every :data:`POLL_SECONDS` instead; a commit in the same process that made a task
claimable wakes it at once all the same (one process serves ``styrmin up``).

A task becomes claimable when it is inserted (a change, or a change an action asked for), and a
change when the change of its deployment before it ends (one change of a deployment runs at a
time): both notify. A lease that ran out is ended by the next claim of its cluster, which an agent
makes at least every ``wait_seconds``; ending it notifies too.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import Counter
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, event, func, inspect, select
from sqlalchemy.orm import Mapper, Session, object_session

from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.store.models import TaskRow

CLAIMABLE_CHANNEL = "styrmin_task_claimable"
POLL_SECONDS = 0.05
"""How often a waiting claim looks again where no notification can wake it."""
_RECONNECT_SECONDS = (0.5, 1.0, 2.0, 5.0)
_ALL = ""
"""The payload of a wake-up for every cluster (after the listening connection was down)."""

log = logging.getLogger("styrmin.claims")


_ENDED = frozenset({TaskStatus.SUCCEEDED.value, TaskStatus.FAILED.value})


@event.listens_for(TaskRow, "after_insert")
def _announce_pending_task(_mapper: Mapper[Any], connection: Connection, task: TaskRow) -> None:
    """A new pending task may be claimed."""
    if task.status == TaskStatus.PENDING.value:
        _notify(connection, task.cluster)
        _remember(task)


@event.listens_for(TaskRow, "after_update")
def _announce_ended_change(_mapper: Mapper[Any], connection: Connection, task: TaskRow) -> None:
    """A change that ended (or whose lease ran out) lets the next change of its deployment start."""
    if (
        task.parent_task_id is None
        and task.status in _ENDED
        and inspect(task).attrs.status.history.has_changes()
    ):
        _notify(connection, task.cluster)
        _remember(task)


def _notify(connection: Connection, cluster: str) -> None:
    """Tell every server on the database, once this transaction commits, that ``cluster`` has work."""
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_notify(CLAIMABLE_CHANNEL, cluster)))


_SESSION_KEY = "styrmin_claimable_clusters"
_IN_THIS_PROCESS: weakref.WeakSet[ClaimWakeups] = weakref.WeakSet()
"""The wake-ups of every app in this process, woken directly after a commit made a task claimable."""


def _remember(task: TaskRow) -> None:
    session = object_session(task)
    if session is not None:
        session.info.setdefault(_SESSION_KEY, set()).add(task.cluster)


@event.listens_for(Session, "after_commit")
def _wake_this_process(session: Session) -> None:
    for cluster in session.info.pop(_SESSION_KEY, ()):
        for wakeups in list(_IN_THIS_PROCESS):
            wakeups._wake(cluster)


@event.listens_for(Session, "after_rollback")
def _forget(session: Session) -> None:
    session.info.pop(_SESSION_KEY, None)


class Mark:
    """How many wake-ups a process had seen before a claim looked for a task."""

    def __init__(self, counts: Counter[str]) -> None:
        self._counts = counts

    def of(self, cluster: str) -> int:
        return self._counts[cluster] + self._counts[_ALL]


class ClaimWakeups:
    """The waiting claims of one server process, and the one connection that LISTENs for them."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._notifies = engine.dialect.name == "postgresql"
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._waiters: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}
        self._listening = False
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        _IN_THIS_PROCESS.add(self)

    @property
    def listening(self) -> bool:
        """Whether notifications wake claims now (else they poll)."""
        return self._listening

    def waiting(self, cluster: str) -> int:
        """How many claims of ``cluster`` wait for a notification now."""
        with self._lock:
            return len(self._waiters.get(cluster, ()))

    def mark(self) -> Mark:
        """Take before looking for a task, then hand to :meth:`wait`, so no wake-up in between is lost."""
        self._start_listening()
        with self._lock:
            return Mark(Counter(self._counts))

    async def wait(self, cluster: str, mark: Mark, timeout: float) -> None:
        """Return once a task of ``cluster`` may have become claimable since ``mark``, or after ``timeout``."""
        if timeout <= 0:
            return
        if not self._listening:  # look again soon, unless a commit in this process wakes it first
            timeout = min(POLL_SECONDS, timeout)
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            if Mark(self._counts).of(cluster) != mark.of(cluster):
                return
            self._waiters.setdefault(cluster, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.get(cluster, set()).discard(waiter)

    def wake_all(self) -> None:
        """Wake every waiting claim (the server is stopping, or notifications may have been missed)."""
        self._wake(_ALL)

    def close(self) -> None:
        """Stop listening (within a second, without holding up the caller) and wake every waiting claim."""
        self._closed.set()
        self.wake_all()

    def _wake(self, cluster: str) -> None:
        with self._lock:
            self._counts[cluster] += 1
            if cluster == _ALL:
                waiters = [w for group in self._waiters.values() for w in group]
            else:
                waiters = list(self._waiters.get(cluster, ()))
        for loop, woken in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(woken.set)

    def _start_listening(self) -> None:
        if not self._notifies or self._thread is not None or self._closed.is_set():
            return
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._listen, name="claim-wakeups", daemon=True)
        self._thread.start()

    def _listen(self) -> None:
        """Hold one LISTEN connection; connect again after an error, waking everyone once back."""
        failures = 0
        while not self._closed.is_set():
            connection = None
            try:
                # Outside the pool: it stays in LISTEN for the process's life.
                connection = self._engine.raw_connection()
                listener = connection.driver_connection
                connection.detach()
                assert isinstance(listener, psycopg.Connection)
                listener.autocommit = True
                listener.execute(f"LISTEN {CLAIMABLE_CHANNEL}")
                if failures:
                    log.warning("Listening for new tasks again; claims stop polling the database.")
                self._listening, failures = True, 0
                self.wake_all()  # a task inserted while no one listened is claimable now
                while not self._closed.is_set():
                    for notification in listener.notifies(timeout=1.0):
                        self._wake(notification.payload)
            except Exception as error:
                if self._closed.is_set():
                    break
                delay = _RECONNECT_SECONDS[min(failures, len(_RECONNECT_SECONDS) - 1)]
                failures += 1
                # Said once per outage; the attempts after it only at debug level.
                log.log(
                    logging.WARNING if failures == 1 else logging.DEBUG,
                    "Not listening for new tasks (%s: %s); claims poll the database until it is back, "
                    "trying again in %g s.",
                    type(error).__name__,
                    error,
                    delay,
                )
                self._listening = False
                self._closed.wait(delay)
            finally:
                self._listening = False
                if connection is not None:
                    try:
                        connection.close()
                    except Exception as error:  # already broken
                        log.debug("Closing the listening connection failed: %s", error)
