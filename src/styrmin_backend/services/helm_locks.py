"""One Helm operation at a time on a deployment's release, across agents and servers.

Helm refuses a write to a release while another runs on it ("another operation (install/upgrade/
rollback) is in progress"). Changes of one deployment run side by side, so each Helm operation takes
this lock for as long as it lasts: a row per release with the holding task and a lease that its
agent renews. A lock whose lease ran out (its agent crashed) is free for the next task.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import bindparam, delete, or_, select, update
from sqlalchemy.orm import Session

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.errors import Conflict
from styrmin_backend.domain.plan import HELM_OPERATIONS
from styrmin_backend.domain.tasks import StepStatus
from styrmin_backend.protocol import ClaimedHelmLock, HelmLockAnswer
from styrmin_backend.services import workflow
from styrmin_backend.services.agents import AgentIdentity, Claim, held_task
from styrmin_backend.store.db import insert_unless_present
from styrmin_backend.store.models import HelmLockRow, StepRow

WAITS_FOR_HELM_NOTE = (
    "Waits for the Helm operation of task {holder} on release {release} to end: Helm runs one "
    "operation at a time per deployment."
)


def take_with_claim(
    session: Session, agent: AgentIdentity, claim: Claim, lease: timedelta
) -> ClaimedHelmLock | None:
    """Take the release's lock for a task just claimed whose first step is a Helm operation
    (``domain.plan.HELM_OPERATIONS``), if it is free: the agent's first call is then that operation.
    None when the first step is something else, or another task holds the lock (the agent asks for it
    itself then, and waits as usual)."""
    if claim.first_step is None or claim.first_operation not in HELM_OPERATIONS:
        return None
    namespace, release = claim.deployment.namespace, claim.deployment.name
    answer = acquire_helm_lock(session, agent, claim.task.id, namespace, release, lease)
    return ClaimedHelmLock(namespace=namespace, release=release) if answer.acquired else None


def _key(agent: AgentIdentity, namespace: str, release: str) -> str:
    return f"{agent.cluster}/{namespace}/{release}"


def acquire_helm_lock(
    session: Session, agent: AgentIdentity, task_id: int, namespace: str, release: str, lease: timedelta
) -> HelmLockAnswer:
    """Take the lock of ``release`` for task ``task_id`` if it is free (or already the task's).

    When another task holds it, the answer names that task, and the waiting task records it (its
    running step gets a note once per holder): the page and the CLI say what it waits for.
    """
    task = held_task(session, agent, task_id)  # raises when the task ended or was cancelled
    key, now = _key(agent, namespace, release), utcnow()
    values = {
        "holder_task_id": task_id,
        "holder_agent_id": agent.id,
        "acquired_at": now,
        "expires_at": now + lease,
    }
    # Of two tasks racing for a free lock, exactly one inserts the row; the other's insert does nothing.
    taken = insert_unless_present(
        session, HelmLockRow, ["release_key"], release_key=key, deployment_name=release, **values
    )
    if not taken:
        # An expired lock, or one this task holds already, is taken over by one conditional update.
        taken_over = session.execute(
            update(HelmLockRow)
            .where(
                HelmLockRow.release_key == key,
                or_(HelmLockRow.expires_at < now, HelmLockRow.holder_task_id == task_id),
            )
            .values(**values)
        )
        taken = taken_over.rowcount == 1  # type: ignore[attr-defined]
    if taken:
        task.waits_for_helm_of_task_id = None
        return HelmLockAnswer(acquired=True, holder_task_id=task_id)
    holder = session.scalar(select(HelmLockRow.holder_task_id).where(HelmLockRow.release_key == key))
    if holder is None:  # let go of between the two statements: the agent asks again at once
        return HelmLockAnswer(acquired=False, holder_task_id=task_id)
    if task.waits_for_helm_of_task_id != holder:
        task.waits_for_helm_of_task_id = holder
        step_id = session.scalar(
            select(StepRow.id)
            .where(StepRow.task_id == task_id, StepRow.status == StepStatus.RUNNING.value)
            .order_by(StepRow.position.desc())
        )
        if step_id is not None:
            workflow.add_step_note(
                session, step_id, WAITS_FOR_HELM_NOTE.format(holder=holder, release=release)
            )
    return HelmLockAnswer(acquired=False, holder_task_id=holder)


def renew_helm_lock(
    session: Session, agent: AgentIdentity, task_id: int, namespace: str, release: str, lease: timedelta
) -> None:
    """Extend the lease of a lock the task holds; raises Conflict when it lost it (its lease ran out).

    A cancelled task's lock is renewed too: its Helm operation still runs until Helm returns.
    """
    renewed = session.execute(
        update(HelmLockRow)
        .where(
            HelmLockRow.release_key == _key(agent, namespace, release),
            HelmLockRow.holder_task_id == task_id,
            HelmLockRow.holder_agent_id == agent.id,
        )
        .values(expires_at=utcnow() + lease)
    ).rowcount  # type: ignore[attr-defined]
    if renewed != 1:
        raise Conflict(
            f"Task {task_id} no longer holds the Helm lock of release {release} (its lease ran out); "
            "another task may run a Helm operation on it now.",
            field="task_id",
        )


def release_helm_lock(
    session: Session, agent: AgentIdentity, task_id: int, namespace: str, release: str
) -> None:
    """Let go of the lock of ``release`` if task ``task_id`` holds it (once its Helm operation ended)."""
    session.execute(
        delete(HelmLockRow).where(
            HelmLockRow.release_key == _key(agent, namespace, release), HelmLockRow.holder_task_id == task_id
        )
    )


_RELEASE_TASK_LOCKS = (
    delete(HelmLockRow)
    .where(
        HelmLockRow.holder_task_id == bindparam("holder_task"),
        HelmLockRow.holder_agent_id == bindparam("holder_agent"),
    )
    # Built once (each task's end sends it), and with no loaded lock to bring up to date: the locks'
    # routes read them with statements of their own.
    .execution_options(synchronize_session=False)
)


def release_task_helm_locks(session: Session, agent: AgentIdentity, task_id: int) -> None:
    """Let go of every Helm lock task ``task_id`` holds, at its end: its Helm operations have ended."""
    session.execute(_RELEASE_TASK_LOCKS, {"holder_task": task_id, "holder_agent": agent.id})


def release_helm_locks_of_tasks(session: Session, agent: AgentIdentity, task_ids: list[int]) -> None:
    """Let go of every Helm lock the tasks ``task_ids`` of ``agent`` hold: their agent's process went
    away (``agents.end_tasks_of_a_gone_instance``), so their Helm operations run no more. The next
    task that takes one finds its release as the process left it, a pending release included, and
    rolls that back as it does after a lock whose lease ran out."""
    if task_ids:
        session.execute(
            delete(HelmLockRow).where(
                HelmLockRow.holder_task_id.in_(task_ids), HelmLockRow.holder_agent_id == agent.id
            )
        )


def helm_holder(session: Session, cluster: str, namespace: str, release: str) -> int | None:
    """The task whose Helm operation on ``release`` runs now (its lease not run out), or None."""
    row = session.get(HelmLockRow, f"{cluster}/{namespace}/{release}")
    if row is None or row.expires_at < utcnow():
        return None
    return row.holder_task_id
