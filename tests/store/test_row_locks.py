"""A row a service reads for update (``store.db.read_for_update``) stays as it read it until its
transaction ends, on both engines.

SQLite has no row locks: the store takes its write lock at such a read instead, so a cancel decided
while a task's end is being written waits for that end, as on PostgreSQL.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.errors import Conflict
from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.services import agents, cancel, workflow
from styrmin_backend.store.db import make_session_factory, read_for_update
from styrmin_backend.store.models import TaskRow

HOLD_SECONDS = 0.5
"""How long the task's end holds the row between its read and its commit."""


def _running_task(factory: sessionmaker[Session], claimed_by: int | None = None) -> int:
    with factory() as session:
        task = TaskRow(
            type="upgrade",
            status=TaskStatus.RUNNING.value,
            deployment_name="shop",
            requested_by="alice",
            created_at=utcnow(),
            started_at=utcnow(),
            claimed_by=claimed_by,
        )
        session.add(task)
        session.commit()
        return task.id


def _cancel_while(
    factory: sessionmaker[Session],
    task_id: int,
    read: Callable[[Session], None],
    end: Callable[[Session], None],
) -> None:
    """Cancel task ``task_id`` while another transaction has done ``read``, holds, then does ``end``
    and commits; the cancel must be refused because the task ended, and the other must not fail."""
    done_reading = threading.Event()
    failures: list[BaseException] = []

    def the_end() -> None:
        try:
            with factory() as session:
                read(session)
                done_reading.set()
                threading.Event().wait(HOLD_SECONDS)  # the end's own work, the row held meanwhile
                end(session)
                session.commit()
        except BaseException as error:
            failures.append(error)
            done_reading.set()

    ending = threading.Thread(target=the_end)
    ending.start()
    assert done_reading.wait(60)
    with factory() as session, pytest.raises(Conflict, match="already ended as succeeded"):
        cancel.cancel_task(session, task_id, by="bob")
    ending.join(60)
    assert not failures, failures
    with factory() as session:
        ended = session.get(TaskRow, task_id)
        assert ended is not None
        assert (ended.status, ended.cancelled_by) == (TaskStatus.SUCCEEDED.value, None)


def test_a_cancel_decided_while_a_task_ends_waits_for_that_end_and_is_refused(engine: Engine) -> None:
    factory = make_session_factory(engine)
    task_id = _running_task(factory)

    def read(session: Session) -> None:
        row = read_for_update(session, TaskRow, task_id)
        assert row is not None and row.status == TaskStatus.RUNNING.value

    def end(session: Session) -> None:
        row = session.get(TaskRow, task_id)
        assert row is not None
        row.status, row.ended_at = TaskStatus.SUCCEEDED.value, utcnow()

    _cancel_while(factory, task_id, read, end)


def test_a_cancel_asked_for_while_the_agent_ends_the_task_is_refused_and_the_end_stands(
    engine: Engine,
) -> None:
    factory = make_session_factory(engine)
    with factory() as session:
        _, key = agents.create_agent(session, "agent-1", "local")
        session.commit()
        agent = agents.authenticate_agent(session, key)
    task_id = _running_task(factory, claimed_by=agent.id)

    # The agent's end checks that it still holds the task, then ends it (agents.end_claimed_task).
    _cancel_while(
        factory,
        task_id,
        lambda session: agents.held_task(session, agent, task_id) and None,
        lambda session: workflow.end_task(session, task_id) and None,
    )


def test_a_row_read_for_update_again_after_its_transaction_ended_is_read_anew(engine: Engine) -> None:
    """Within a transaction a locked row is answered from the session; once the transaction ends,
    another's change to the row is what the next read for update sees, in the same session."""
    factory = make_session_factory(engine)
    task_id = _running_task(factory)
    with factory() as session:
        first = read_for_update(session, TaskRow, task_id)
        assert first is not None and first.status == TaskStatus.RUNNING.value
        session.flush()  # a flush ends a subtransaction of its own, not the lock
        assert read_for_update(session, TaskRow, task_id) is first
        session.commit()
        with factory() as other:
            cancel.cancel_task(other, task_id, by="bob")
            other.commit()
        again = read_for_update(session, TaskRow, task_id)
        assert again is not None and again.status == TaskStatus.CANCELLED.value
