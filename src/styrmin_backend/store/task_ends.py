"""Waking this process's waiting task reads as soon as a task ends here.

A read of one task with ``wait_until_end`` looks at the task's status every few milliseconds; when
the task ends through this server process (the agent's end of a task, a committed transaction),
the wait returns at once instead. Ends in other processes are seen by the polling.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from sqlalchemy import event, inspect
from sqlalchemy.orm import Mapper, Session, object_session

from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.store.models import TaskRow

_ENDED = frozenset({TaskStatus.SUCCEEDED.value, TaskStatus.FAILED.value})
_SESSION_KEY = "styrmin_tasks_ended"


class TaskEnds:
    """The waiting reads of one process, woken when a transaction that ended a task commits."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ends = 0
        self._waiters: set[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = set()

    def mark(self) -> int:
        """Take before reading the task, then hand to :meth:`wait`, so no end in between is missed."""
        with self._lock:
            return self._ends

    async def wait(self, mark: int, timeout: float) -> None:
        """Return once a task ended in this process since ``mark``, or after ``timeout``."""
        waiter = (asyncio.get_running_loop(), asyncio.Event())
        with self._lock:
            if self._ends != mark:
                return
            self._waiters.add(waiter)
        try:
            await asyncio.wait_for(waiter[1].wait(), timeout)
        except TimeoutError:
            pass
        finally:
            with self._lock:
                self._waiters.discard(waiter)

    def wake(self) -> None:
        """A task ended: wake every waiting read."""
        with self._lock:
            self._ends += 1
            waiters = list(self._waiters)
        for loop, woken in waiters:
            if not loop.is_closed():
                loop.call_soon_threadsafe(woken.set)


TASK_ENDS = TaskEnds()
"""This process's waiting reads."""


@event.listens_for(TaskRow, "after_update")
def _remember_ended_task(_mapper: Mapper[Any], _connection: Any, task: TaskRow) -> None:
    session = object_session(task)
    if session is not None and task.status in _ENDED and inspect(task).attrs.status.history.has_changes():
        session.info[_SESSION_KEY] = True


@event.listens_for(Session, "after_commit")
def _wake_after_commit(session: Session) -> None:
    if session.info.pop(_SESSION_KEY, False):
        TASK_ENDS.wake()


@event.listens_for(Session, "after_rollback")
def _forget_after_rollback(session: Session) -> None:
    session.info.pop(_SESSION_KEY, None)
