"""Waking this process's waiting requests once a commit changed a task or a backup location: one
mechanism, three channels.

- :data:`TASK_ENDED`: a task ended (succeeded or failed; key: :func:`task_key`). A read of one task
  with ``wait_until_end`` looks at the task every so often and returns at once when it is woken.
- :data:`LOCATION_CHECK`: a backup location of a cluster waits for its agent's check; the agent's
  waiting ask for the next check is woken.
- :data:`TASK_CLAIMABLE`: a task of a cluster may be claimed now (a pending task was inserted). An
  agent's waiting claim is woken. A task's end wakes no claim: a pending change never waits for
  the change before it (each runs as its own workflow; only Helm operations take turns), and the
  agent whose slot the end frees claims again by itself. The same transaction also sends ``NOTIFY`` :data:`CLAIMABLE_CHANNEL` on PostgreSQL, which
  wakes the claims of the other server processes (``store.claim_wakeups`` listens for it).

The rules are the listeners on ``TaskRow`` below: they note the wake-up in the session, and the
commit sends it (a rollback forgets it), so nothing is woken for a change that never happened.
A waiter takes a :class:`Mark` before it looks at the database and hands it to :meth:`Waiters.wait`,
so a wake-up between the look and the wait is not missed.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import Counter
from typing import Any

from sqlalchemy import Connection, event, func, inspect, select
from sqlalchemy.orm import Mapper, Session, object_session

from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.store.models import BackupLocationRow, TaskRow

ANY = ""
"""The key of a wake-up for every waiter of a channel (whatever cluster it waits for)."""
CLAIMABLE_CHANNEL = "styrmin_task_claimable"
"""PostgreSQL's channel of :data:`TASK_CLAIMABLE`; the payload is the cluster."""

_ENDED = frozenset(status.value for status in TaskStatus if status.ended)


def task_key(task_id: int) -> str:
    """The key of :data:`TASK_ENDED`'s wake-ups for one task."""
    return f"task:{task_id}"


class Mark:
    """How many wake-ups the waiters had seen before a request looked at the database."""

    def __init__(self, counts: Counter[str]) -> None:
        self._counts = counts

    def of(self, key: str) -> int:
        """The wake-ups seen that concern waiters of ``key``."""
        return self._counts[key] + (self._counts[ANY] if key != ANY else 0)


class Waiters:
    """Requests waiting on one channel (each for a key: a cluster, or :data:`ANY`), in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._waiting: dict[str, set[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    def mark(self) -> Mark:
        """Take before looking at the database, then hand to :meth:`wait`."""
        with self._lock:
            return Mark(Counter(self._counts))

    def waiting(self, key: str) -> int:
        """How many requests wait for ``key`` now."""
        with self._lock:
            return len(self._waiting.get(key, ()))

    async def wait(self, key: str, mark: Mark, timeout: float) -> None:
        """Return once woken for ``key`` (or for all) since ``mark``, or after ``timeout`` seconds."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            if Mark(self._counts).of(key) != mark.of(key):
                return
            self._waiting.setdefault(key, set()).add(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiting.get(key, set()).discard(waiter)

    def wake_all(self) -> None:
        """Wake every waiting request (the server is stopping)."""
        self.wake(ANY)

    def wake(self, key: str) -> None:
        """Wake the requests waiting for ``key``; :data:`ANY` wakes every one."""
        with self._lock:
            self._counts[key] += 1
            if key == ANY:
                woken = [waiter for group in self._waiting.values() for waiter in group]
            else:
                woken = list(self._waiting.get(key, ()))
        for loop, event_ in woken:
            if not loop.is_closed():
                loop.call_soon_threadsafe(event_.set)


class Channel:
    """One kind of wake-up: noted in a session, sent to every :class:`Waiters` of it once that commits."""

    def __init__(self, name: str) -> None:
        self._session_key = f"styrmin_wake_{name}"
        self._all: weakref.WeakSet[Waiters] = weakref.WeakSet()

    def waiters(self) -> Waiters:
        """New waiters of this channel, woken by this process's commits for as long as they are kept."""
        waiters = Waiters()
        self._all.add(waiters)
        return waiters

    def note(self, row: object, key: str) -> None:
        """Wake the waiters of ``key`` once the session that changed ``row`` commits."""
        session = object_session(row)
        if session is not None:
            session.info.setdefault(self._session_key, set()).add(key)

    def _committed(self, session: Session) -> None:
        for key in session.info.pop(self._session_key, ()):
            for waiters in list(self._all):
                waiters.wake(key)

    def _rolled_back(self, session: Session) -> None:
        session.info.pop(self._session_key, None)


TASK_ENDED = Channel("task_ended")
"""A task ended (key: :func:`task_key`)."""
TASK_CLAIMABLE = Channel("task_claimable")
"""A task of a cluster may be claimed (key: the cluster)."""
LOCATION_CHECK = Channel("location_check")
"""A backup location of a cluster waits for its check (key: the cluster)."""
_CHANNELS = (TASK_ENDED, TASK_CLAIMABLE, LOCATION_CHECK)


@event.listens_for(BackupLocationRow, "after_insert")
def _location_inserted(_mapper: Mapper[Any], _connection: Connection, location: BackupLocationRow) -> None:
    LOCATION_CHECK.note(location, location.cluster)


@event.listens_for(TaskRow, "after_insert")
def _task_inserted(_mapper: Mapper[Any], connection: Connection, task: TaskRow) -> None:
    if task.status == TaskStatus.PENDING.value:  # a new pending task may be claimed
        _claimable(connection, task)


@event.listens_for(TaskRow, "after_update")
def _task_updated(_mapper: Mapper[Any], _connection: Connection, task: TaskRow) -> None:
    if task.status in _ENDED and inspect(task).attrs.status.history.has_changes():
        TASK_ENDED.note(task, task_key(task.id))


def _claimable(connection: Connection, task: TaskRow) -> None:
    """Tell this process once the transaction commits; on PostgreSQL every server on the database too."""
    if connection.dialect.name == "postgresql":
        connection.execute(select(func.pg_notify(CLAIMABLE_CHANNEL, task.cluster)))
    TASK_CLAIMABLE.note(task, task.cluster)


@event.listens_for(Session, "after_commit")
def _wake_after_commit(session: Session) -> None:
    for channel in _CHANNELS:
        channel._committed(session)


@event.listens_for(Session, "after_rollback")
def _forget_after_rollback(session: Session) -> None:
    for channel in _CHANNELS:
        channel._rolled_back(session)
