"""A row a service reads "for update" stays as it read it until its transaction ends, on both engines.

SQLite has no row locks: the store takes its write lock at such a read instead (store.db), so a
cancel decided while a task's end is being written waits for that end, as on PostgreSQL.
"""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.errors import Conflict
from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.services import cancel
from styrmin_backend.store.db import make_session_factory
from styrmin_backend.store.models import TaskRow

HOLD_SECONDS = 0.5
"""How long the task's end holds the row between its read and its commit."""


def test_a_cancel_decided_while_a_task_ends_waits_for_that_end_and_is_refused(engine: Engine) -> None:
    factory = make_session_factory(engine)
    with factory() as session:
        task = TaskRow(
            type="upgrade",
            status=TaskStatus.RUNNING.value,
            deployment_name="shop",
            requested_by="alice",
            created_at=utcnow(),
            started_at=utcnow(),
        )
        session.add(task)
        session.commit()
        task_id = task.id
    read = threading.Event()
    failures: list[BaseException] = []

    def end_the_task() -> None:
        """What a task's end does: read the task for update, decide, write, commit."""
        try:
            with factory() as session:
                row = session.get(TaskRow, task_id, with_for_update=True)
                assert row is not None and row.status == TaskStatus.RUNNING.value
                read.set()
                threading.Event().wait(HOLD_SECONDS)  # the end's own work, the row held meanwhile
                row.status = TaskStatus.SUCCEEDED.value
                row.ended_at = utcnow()
                session.commit()
        except BaseException as error:
            failures.append(error)
            read.set()

    ending = threading.Thread(target=end_the_task)
    ending.start()
    assert read.wait(60)
    with factory() as session, pytest.raises(Conflict, match="already ended as succeeded"):
        cancel.cancel_task(session, task_id, by="bob")
    ending.join(60)
    assert not failures, failures
    with factory() as session:
        ended = session.get(TaskRow, task_id)
        assert ended is not None
        assert (ended.status, ended.cancelled_by) == (TaskStatus.SUCCEEDED.value, None)
