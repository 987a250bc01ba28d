"""Agents: their keys, claiming pending tasks with a lease, and ending them."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import bindparam, delete, func, or_, select, update
from sqlalchemy.orm import Session

from styrmin_backend.clock import as_utc, utcnow
from styrmin_backend.domain import outages as outage_rules
from styrmin_backend.domain.errors import Conflict, InvalidInput, NotAuthenticated, NotFound, TaskCancelled
from styrmin_backend.domain.plan import PLAN_VERSION, Operation, UnplannableChange
from styrmin_backend.domain.redaction import redact
from styrmin_backend.domain.tasks import StepStatus, TaskStatus
from styrmin_backend.domain.waiting import AgentState, agent_state
from styrmin_backend.drivers import DriverSpec
from styrmin_backend.protocol import (
    FIRST_STEP_AT_CLAIM,
    Change,
    ComponentStatus,
    plan_change,
    plan_needs_actions,
)
from styrmin_backend.services import auth, backups, deployment_status, drivers, workflow
from styrmin_backend.services.change_models import requested_change, requested_of
from styrmin_backend.services.changes import claimed_change
from styrmin_backend.services.deployment_models import Deployment
from styrmin_backend.services.read_model import ReadModel
from styrmin_backend.services.secrets import hash_token, new_token
from styrmin_backend.services.task_models import Step, Task
from styrmin_backend.store.db import insert_unless_present, outages_of, read_for_update
from styrmin_backend.store.models import (
    AgentInstanceRow,
    AgentRow,
    ChangeRow,
    DeploymentRow,
    StepRow,
    TaskRow,
)

AGENT_KEY_PREFIX = "sta_"
_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,62}[a-z0-9])?$")
AGENT_STOPPED_ERROR = outage_rules.AGENT_STOPPED_ERROR

# The statements of an agent's calls are built once, with their values bound at each call: every
# task an agent runs sends them, and building a statement took as long as running it (py-spy of
# `styrmin server` under bench/agent_protocol_cpu.py).
_AGENT_BY_KEY = select(
    AgentRow.id, AgentRow.name, AgentRow.cluster, AgentRow.revoked_at, AgentRow.last_seen_at
).where(AgentRow.key_hash == bindparam("key_hash"))
_EXPIRED_LEASES = select(TaskRow.id).where(
    TaskRow.cluster == bindparam("cluster"),
    TaskRow.status == TaskStatus.RUNNING.value,
    TaskRow.lease_expires_at <= bindparam("now"),
)
_PENDING = (
    select(TaskRow.id)
    .where(TaskRow.cluster == bindparam("cluster"), TaskRow.status == TaskStatus.PENDING.value)
    .order_by(TaskRow.parent_task_id.is_(None), TaskRow.id)
    .limit(20)
)
"""Pending tasks of a cluster, those an action started first, then the oldest (see claim_next_task)."""
_PENDING_STARTED_BY_ACTIONS = _PENDING.where(TaskRow.parent_task_id.is_not(None))
_CLAIM = (
    update(TaskRow)
    .where(TaskRow.id == bindparam("claimed_task"), TaskRow.status == TaskStatus.PENDING.value)
    .values(
        claimed_by=bindparam("claiming_agent"),
        claimed_by_instance=bindparam("claiming_instance"),
        lease_expires_at=bindparam("lease_until"),
    )
    # No loaded task to bring up to date: the claim read only ids.
    .execution_options(synchronize_session=False)
)


@dataclass(frozen=True)
class AgentIdentity:
    """The agent behind a request, and the cluster it serves."""

    id: int
    name: str
    cluster: str
    last_seen_at: datetime | None = None
    """When the server last noted that the agent called (read with the key, so a claim need not)."""


class AgentProcess(ReadModel):
    """A running process of an agent (its instance) that holds a presence connection to a server."""

    instance: str
    connected_at: datetime
    """When it opened its presence connection (its latest, on whichever server)."""
    seen_at: datetime
    """When the server holding that connection last noted it (every heartbeat, 15 s)."""
    running_tasks: list[int] = []
    """The running tasks it claimed, oldest first."""


class Agent(ReadModel):
    """A registered agent, as administrators see it (never its key)."""

    name: str
    cluster: str
    created_at: datetime
    revoked_at: datetime | None
    last_seen_at: datetime | None
    processes: list[AgentProcess] = []
    """Its processes that hold a presence connection now (``outage_rules.instance_connected``)."""
    state: AgentState
    """Connected, not connected, never connected or revoked (``waiting.agent_state``)."""

    @property
    def revoked(self) -> bool:
        """Whether an administrator revoked the agent (its key no longer works)."""
        return self.revoked_at is not None


@dataclass(frozen=True)
class Claim:
    """A task an agent claimed: what to do, for which deployment, and the reconciliation's token."""

    task: Task
    change: Change
    """The change to carry out, with the target the server resolved for it now."""
    deployment: Deployment
    actions_token: str
    first_step: Step | None = None
    """The plan's first step, started with the claim (see :func:`claim_next_task`)."""
    first_operation: Operation | None = None
    """What the agent does for ``first_step`` (None with it)."""


def create_agent(session: Session, name: str, cluster: str) -> tuple[Agent, str]:
    """Register an agent for ``cluster``; returns it and its key (shown once, stored hashed)."""
    for field, value in (("name", name), ("cluster", cluster)):
        if not _NAME.fullmatch(value):
            raise InvalidInput(
                f'"{value}" is not a valid {field}; use lower-case letters, digits and "-".', field=field
            )
    if session.scalars(select(AgentRow.id).where(AgentRow.name == name)).first() is not None:
        raise Conflict(f'An agent "{name}" already exists; choose another name.', field="name")
    key = AGENT_KEY_PREFIX + new_token().removeprefix("sty_")
    agent = AgentRow(name=name, cluster=cluster, key_hash=hash_token(key), created_at=utcnow())
    session.add(agent)
    session.flush()
    return _agent(agent, []), key


def rotate_agent_key(session: Session, name: str, cluster: str) -> str:
    """Give agent ``name`` a new key (making the agent when missing); the old key stops working."""
    agent = session.scalars(select(AgentRow).where(AgentRow.name == name)).one_or_none()
    if agent is None:
        return create_agent(session, name, cluster)[1]
    key = AGENT_KEY_PREFIX + new_token().removeprefix("sty_")
    agent.key_hash, agent.cluster, agent.revoked_at = hash_token(key), cluster, None
    return key


def list_agents(session: Session) -> list[Agent]:
    """Every registered agent, by name, with its processes that hold a presence connection now."""
    processes = _connected_processes(session)
    return [
        _agent(row, processes.get(row.id, []))
        for row in session.scalars(select(AgentRow).order_by(AgentRow.name))
    ]


def _agent(row: AgentRow, processes: list[AgentProcess]) -> Agent:
    """Agent ``row`` as administrators see it, with its ``processes`` connected now."""
    last_seen_at = as_utc(row.last_seen_at) if row.last_seen_at is not None else None
    state = agent_state(
        revoked=row.revoked_at is not None,
        last_seen_at=last_seen_at,
        processes_connected=len(processes),
        now=utcnow(),
    )
    return Agent(
        name=row.name,
        cluster=row.cluster,
        created_at=row.created_at,
        revoked_at=row.revoked_at,
        last_seen_at=row.last_seen_at,
        processes=processes,
        state=state,
    )


def _connected_processes(session: Session) -> dict[int, list[AgentProcess]]:
    """Agent id -> its instances seen within ``INSTANCE_SEEN_WITHIN``, oldest connection first, each
    with the running tasks it claimed. Two reads, whatever the number of agents."""
    now = utcnow()
    seen = func.coalesce(AgentInstanceRow.seen_at, AgentInstanceRow.connected_at)
    rows = session.execute(
        select(AgentInstanceRow.agent_id, AgentInstanceRow.instance, AgentInstanceRow.connected_at, seen)
        .where(seen >= now - outage_rules.INSTANCE_SEEN_WITHIN)
        .order_by(AgentInstanceRow.connected_at, AgentInstanceRow.instance)
    ).all()
    if not rows:
        return {}
    running: dict[tuple[int, str], list[int]] = {}
    for claimed_by, claimed_by_instance, task_id in session.execute(
        select(TaskRow.claimed_by, TaskRow.claimed_by_instance, TaskRow.id)
        .where(TaskRow.status == TaskStatus.RUNNING.value, TaskRow.claimed_by_instance.is_not(None))
        .order_by(TaskRow.id)
    ):
        if claimed_by is not None and claimed_by_instance is not None:
            running.setdefault((claimed_by, claimed_by_instance), []).append(task_id)
    processes: dict[int, list[AgentProcess]] = {}
    for agent_id, instance, connected_at, seen_at in rows:
        if not outage_rules.instance_connected(as_utc(seen_at), now):
            continue  # the database's clock and ours: the rule decides
        processes.setdefault(agent_id, []).append(
            AgentProcess(
                instance=instance,
                connected_at=as_utc(connected_at),
                seen_at=as_utc(seen_at),
                running_tasks=running.get((agent_id, instance), []),
            )
        )
    return processes


def revoke_agent(session: Session, name: str) -> Agent:
    """Revoke an agent's key: its calls get 401 from now on."""
    agent = session.scalars(select(AgentRow).where(AgentRow.name == name)).one_or_none()
    if agent is None:
        raise NotFound(f'There is no agent "{name}".', field="name")
    agent.revoked_at = agent.revoked_at or utcnow()
    return _agent(agent, [])


def authenticate_agent(session: Session, key: str) -> AgentIdentity:
    """The agent whose key is ``key``; raises NotAuthenticated."""
    agent = session.execute(_AGENT_BY_KEY, {"key_hash": hash_token(key)}).one_or_none()
    if agent is None or agent.revoked_at is not None:
        raise NotAuthenticated(
            "The agent key is not valid or was revoked; ask an administrator for a new one."
        )
    return AgentIdentity(agent.id, agent.name, agent.cluster, agent.last_seen_at)


def fail_expired_leases(session: Session, cluster: str) -> list[int]:
    """End as failed every running task of ``cluster`` whose agent stopped renewing its lease.

    A lease that ran out while this server could not reach the database is judged from the end of
    that outage (``domain.outages.lease_ran_out``): no agent could renew then.
    """
    now = utcnow()
    # Only leases past their end are read: each claim attempt runs this, and with many tasks running
    # (a batch of upgrades) loading every running task's row made each attempt grow with them.
    expired_ids = session.scalars(_EXPIRED_LEASES, {"cluster": cluster, "now": now}).all()
    if not expired_ids:
        return []
    expired = session.scalars(select(TaskRow).where(TaskRow.id.in_(expired_ids))).all()
    outage = outages_of(session.get_bind()).last()  # type: ignore[arg-type]
    ended = []
    for task in expired:
        assert task.lease_expires_at is not None
        expires_at = as_utc(task.lease_expires_at)
        if not outage_rules.lease_ran_out(expires_at, now, outage):
            continue
        _end(session, task, error=outage_rules.lease_expiry_error(expires_at, outage), result=None)
        ended.append(task.id)
    return ended


def claim_next_task(
    session: Session,
    agent: AgentIdentity,
    lease: timedelta,
    token_lifetime: timedelta,
    *,
    started_by_actions_only: bool = False,
    plan_version: int | None = None,
    instance: str | None = None,
) -> Claim | None:
    """Claim the next pending task of the agent's cluster, start it, and mint its actions token.

    Tasks started by an action come first, oldest first, then the other tasks, oldest first: the
    task that started one is running and waits for it, so it must never wait behind new work. Each
    change runs as its own workflow as soon as a slot is free, beside the other changes of its
    deployment: only their Helm operations take turns (see :func:`acquire_helm_lock`). An agent
    whose slots are all taken asks with ``started_by_actions_only`` and runs those beside its slots
    (see docs/agent.md).

    For an agent that plans as this server does (``plan_version`` is ``domain.plan.PLAN_VERSION``),
    the plan's first step starts in the same transaction, for the changes of
    ``protocol.FIRST_STEP_AT_CLAIM``: the agent's first call of the task is then its first operation.

    ``instance`` names the agent's process that claims: should it go away (see
    :func:`end_tasks_of_a_gone_instance`), the task ends then, not when its lease runs out.
    """
    # An idle claim (an agent long-polls several times a second) only reads: on SQLite every write
    # takes the one write lock, and a write per poll starved lease renewals and step writes.
    fail_expired_leases(session, agent.cluster)
    _record_seen(session, agent)
    pending = _PENDING_STARTED_BY_ACTIONS if started_by_actions_only else _PENDING
    candidates = session.scalars(pending, {"cluster": agent.cluster}).all()
    for task_id in candidates:
        # A conditional update claims it: of two agents racing, exactly one changes the row (the
        # other's UPDATE waits for the first's transaction on PostgreSQL, then matches nothing).
        claimed = session.execute(
            _CLAIM,
            {
                "claimed_task": task_id,
                "claiming_agent": agent.id,
                "claiming_instance": instance,
                "lease_until": utcnow() + lease,
            },
        )
        if claimed.rowcount != 1:  # type: ignore[attr-defined]
            continue
        # The token first: the task's start and its token are then written in one UPDATE.
        issued = auth.mint_actions_token(session, token_lifetime, task_id=task_id)
        task = workflow.start_task(session, task_id)
        task.actions_token_id = issued.id
        backups.record_backup_start(session, task)
        deployment = session.get(DeploymentRow, task.deployment_id) if task.deployment_id else None
        if deployment is None:
            _end(session, task, error="The deployment of this task no longer exists.", result=None)
            continue
        change_row = session.get(ChangeRow, task.change_id) if task.change_id else None
        read = Deployment.model_validate(deployment)
        change = claimed_change(
            requested_of(change_row) if change_row else requested_change(task.type, None), read
        )
        first_step, first_operation = None, None
        if plan_version == PLAN_VERSION and change.type in FIRST_STEP_AT_CLAIM:
            first_step, first_operation = _start_first_step(session, task_id, change, read.driver_name)
        return Claim(
            task=Task.model_validate(task),
            change=change,
            deployment=read,
            actions_token=issued.token,
            first_step=first_step,
            first_operation=first_operation,
        )
    return None


def _start_first_step(
    session: Session, task_id: int, change: Change, driver: str
) -> tuple[Step | None, Operation | None]:
    """Start the first step of ``change``'s plan, as the agent would, and say its operation; None
    when there is none to start (no plan covers the change, or its driver version is gone: the
    agent says so itself)."""
    spec = None
    if plan_needs_actions(change):
        stored = drivers.spec_of(session, driver, change.target.driver_version)
        if stored is None:
            return None, None
        spec = DriverSpec.model_validate(stored)
    try:
        plan = plan_change(change, spec)
    except UnplannableChange:
        return None, None
    if not plan.steps:
        return None, None
    first = plan.steps[0]
    return workflow.add_step(session, task_id, first.name, position=0), first.operation


MAX_INSTANCES_KEPT = 256
"""The most instances of one agent the server keeps (those that connected last): one agent runs a
handful of processes, and a leaked key must not fill the database with names."""
_INSTANCE_FORGOTTEN_AFTER = timedelta(days=30)
"""An agent's instance that has not opened a presence connection for this long is forgotten: its
process is long gone. Forgotten (by age, or beyond :data:`MAX_INSTANCES_KEPT`), a live one's tasks
end as those of an agent without a presence connection do, when their leases run out."""


def connect_instance(session: Session, agent: AgentIdentity, instance: str) -> int:
    """Note that ``instance``, a process of ``agent``, opened a presence connection; its number.

    The number moves on at each connection of the instance, whichever server holds it: the server
    whose connection closes then tells, after a grace, whether the instance came back
    (:func:`end_tasks_of_a_gone_instance`). The increment locks the row (PostgreSQL) or the
    database (SQLite) until the commit, so two connections never get one number.
    """
    now = utcnow()
    key = {"agent_id": agent.id, "instance": instance}
    insert_unless_present(
        session,
        AgentInstanceRow,
        ["agent_id", "instance"],
        **key,
        connection=0,
        connected_at=now,
        seen_at=now,
    )
    session.execute(
        update(AgentInstanceRow)
        .where(AgentInstanceRow.agent_id == agent.id, AgentInstanceRow.instance == instance)
        .values(connection=AgentInstanceRow.connection + 1, connected_at=now, seen_at=now)
        .execution_options(synchronize_session=False)
    )
    newest = (
        select(AgentInstanceRow.instance)
        .where(AgentInstanceRow.agent_id == agent.id)
        .order_by(AgentInstanceRow.connected_at.desc())
        .limit(MAX_INSTANCES_KEPT)
    )
    session.execute(
        delete(AgentInstanceRow).where(
            AgentInstanceRow.agent_id == agent.id,
            or_(
                AgentInstanceRow.connected_at < now - _INSTANCE_FORGOTTEN_AFTER,
                AgentInstanceRow.instance.not_in(newest.scalar_subquery()),
            ),
        )
    )
    number = session.scalar(
        select(AgentInstanceRow.connection).where(
            AgentInstanceRow.agent_id == agent.id, AgentInstanceRow.instance == instance
        )
    )
    assert number is not None  # inserted or kept above, in this transaction
    return number


def note_instance_seen(session: Session, agent: AgentIdentity, instance: str, connection: int) -> None:
    """Note that ``instance`` of ``agent`` still holds its presence connection number ``connection``
    (a heartbeat of it); nothing when the instance connected again since, where the newer connection's
    server notes it."""
    session.execute(
        update(AgentInstanceRow)
        .where(
            AgentInstanceRow.agent_id == agent.id,
            AgentInstanceRow.instance == instance,
            AgentInstanceRow.connection == connection,
        )
        .values(seen_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def end_tasks_of_a_gone_instance(
    session: Session,
    agent: AgentIdentity,
    instance: str,
    connection: int,
    closed_at: datetime,
    grace: timedelta,
) -> list[int] | None:
    """End failed the running tasks ``instance`` of ``agent`` claimed, when its presence connection
    number ``connection``, closed at ``closed_at``, was its last (``domain.outages.instance_went_away``):
    its process crashed or was killed, and its tasks' leases would run on for nothing. Their ids;
    None when the instance connected again (on any server) or is not known.

    The route lets go of their Helm locks in the same transaction
    (``helm_locks.release_helm_locks_of_tasks``).
    """
    row = read_for_update(session, AgentInstanceRow, (agent.id, instance))
    if not outage_rules.instance_went_away(connection, row.connection if row is not None else None):
        return None
    session.delete(row)
    # Locked as they are read: an end of the agent's that commits meanwhile (it was not gone after
    # all) leaves its task out, rather than being written over.
    held = session.scalars(
        select(TaskRow)
        .where(
            TaskRow.status == TaskStatus.RUNNING.value,
            TaskRow.claimed_by == agent.id,
            TaskRow.claimed_by_instance == instance,
        )
        .with_for_update()
    ).all()
    error = outage_rules.agent_gone_error(instance, closed_at, grace)
    for task in held:
        _end(session, task, error=error, result=None)
    return [task.id for task in held]


_SEEN_EVERY = timedelta(seconds=10)
"""How often a polling agent's ``last_seen_at`` is written (the Agents page counts 60 s as connected)."""


def _record_seen(session: Session, agent: AgentIdentity) -> None:
    """Note that the agent called, unless that was noted less than ``_SEEN_EVERY`` ago."""
    now = utcnow()
    seen = agent.last_seen_at
    if seen is None or now - as_utc(seen) >= _SEEN_EVERY:
        session.execute(update(AgentRow).where(AgentRow.id == agent.id).values(last_seen_at=now))


def held_task(session: Session, agent: AgentIdentity, task_id: int) -> TaskRow:
    """Task ``task_id`` if ``agent`` holds its lease; raises Conflict otherwise.

    Read for update: what the agent then writes of the task (a step, its end) is decided on the row
    as it stays until the commit, never on one a cancel changes meanwhile.
    """
    task = read_for_update(session, TaskRow, task_id)
    if task is None:
        raise NotFound(f"There is no task {task_id}.", field="task_id")
    if task.status == TaskStatus.CANCELLED.value and task.claimed_by == agent.id:
        raise TaskCancelled(
            f"Task {task_id} was cancelled{f' by {task.cancelled_by}' if task.cancelled_by else ''}; "
            "stop its running action and leave the cluster as it is.",
            field="task_id",
        )
    if task.claimed_by != agent.id or task.status != TaskStatus.RUNNING.value:
        raise Conflict(
            f"Task {task_id} is {task.status} and not held by agent {agent.name}; stop working on it.",
            field="task_id",
        )
    return task


def renew_lease(session: Session, agent: AgentIdentity, task_id: int, lease: timedelta) -> Task:
    """Extend the agent's lease of a task it is running; raises Conflict when it no longer holds it.

    One conditional UPDATE, so the renewal holds the database's write lock (SQLite has one) for a
    single statement: a renewal must never fail because other tasks keep the database busy.
    """
    session.execute(
        update(TaskRow)
        .where(
            TaskRow.id == task_id,
            TaskRow.claimed_by == agent.id,
            TaskRow.status == TaskStatus.RUNNING.value,
        )
        .values(lease_expires_at=utcnow() + lease)
    )
    return Task.model_validate(
        held_task(session, agent, task_id)
    )  # raises, saying why, when the agent does not hold it


def end_claimed_task(
    session: Session,
    agent: AgentIdentity,
    task_id: int,
    *,
    error: str | None,
    result: dict[str, object] | None,
    components: list[ComponentStatus] | None = None,
    last_step_id: int | None = None,
) -> Task:
    """End a task the agent ran; revokes its actions token and sets the deployment's status.

    With ``components``, also records the deployment's component workloads as the agent saw them
    at the task's end, in the same transaction (one call of the agent instead of two). With
    ``last_step_id``, that step of the task ends succeeded first, unless it has ended (a retry).

    Safe to send again: a task this agent ran that has ended already is answered as it is, except
    that when its lease ran out before the agent's end arrived, the agent's account replaces the
    lease's (it knows why the task failed; the lease only knew it went quiet), and that a cancelled
    task's work is noted as stopped.
    """
    task = read_for_update(session, TaskRow, task_id)
    if task is not None and task.claimed_by == agent.id and task.status != TaskStatus.RUNNING.value:
        if task.status == TaskStatus.FAILED.value and outage_rules.ended_because_agent_stopped(task.error):
            late = outage_rules.AGENT_LATE_SUCCESS_NOTE.format(at=outage_rules.when(utcnow()))
            task.error = redact(error) if error is not None else f"{task.error}{late}"
        if task.status == TaskStatus.CANCELLED.value:  # its reconciliation ended: its work has stopped
            task.stopped_at = task.stopped_at or utcnow()
        return Task.model_validate(task)
    task = held_task(session, agent, task_id)
    if last_step_id is not None:
        _end_last_step(session, task, last_step_id)
    if components is not None and task.deployment_id is not None:
        deployment = session.get(DeploymentRow, task.deployment_id)
        if deployment is not None:
            _record_components(deployment, components)
    _end(session, task, error=error, result=dict(result) if result else None)
    return Task.model_validate(task)


def _end_last_step(session: Session, task: TaskRow, step_id: int) -> None:
    """End ``step_id``, a step of ``task``, succeeded; one ended already stays as it ended."""
    step = read_for_update(session, StepRow, step_id)
    if step is None or step.task_id != task.id:
        raise InvalidInput(
            f"last_step_id {step_id} is not a step of task {task.id}: send the id that "
            f"POST /agent/tasks/{task.id}/steps answered"
        )
    _end_step_once(session, step_id, None)


def add_held_task_step(session: Session, agent: AgentIdentity, task_id: int, name: str) -> Step:
    """Start step ``name`` of a task the agent holds; safe to send again.

    A retried call whose first answer was lost finds the step it made still running, last: that
    step is answered, so the task never records the step twice.
    """
    held_task(session, agent, task_id)
    last = session.scalars(
        select(StepRow).where(StepRow.task_id == task_id).order_by(StepRow.position.desc()).limit(1)
    ).first()
    if last is not None and last.name == name and last.status == StepStatus.RUNNING.value:
        return Step.model_validate(last)
    return workflow.add_step(session, task_id, name, position=0 if last is None else last.position + 1)


def end_held_step(session: Session, agent: AgentIdentity, step_id: int, error: str | None) -> Step:
    """End a step of a task the agent holds; a step ended already is answered as it is (a retry)."""
    held_task(session, agent, workflow.task_of_step(session, step_id))
    return _end_step_once(session, step_id, error)


def _end_step_once(session: Session, step_id: int, error: str | None) -> Step:
    """End a step; one ended already is answered as it ended (a retried call)."""
    row = read_for_update(session, StepRow, step_id)
    if row is not None and row.ended_at is not None:
        return Step.model_validate(row)
    return workflow.end_step(session, step_id, error=error)


def add_note_once(session: Session, step_id: int, note: str) -> Step:
    """Add ``note`` to a step unless it is the step's last note already (a retried call)."""
    row = read_for_update(session, StepRow, step_id)
    if row is not None and row.notes and row.notes[-1] == redact(note):
        return Step.model_validate(row)
    return workflow.add_step_note(session, step_id, note)


def _end(session: Session, task: TaskRow, *, error: str | None, result: dict[str, object] | None) -> None:
    workflow.end_task(
        session, task.id, error=error, result=result, unended=error or "The task ended before this step did."
    )
    backups.record_backup_end(session, task)
    task.lease_expires_at = None
    if task.actions_token_id is not None:
        auth.revoke_actions_token(session, task.actions_token_id)
    deployment_status.record_task_end(session, task)


def report_components(
    session: Session, agent: AgentIdentity, name: str, statuses: list[ComponentStatus]
) -> Deployment:
    """Store what the agent sees of a deployment's component workloads."""
    deployment = session.scalars(select(DeploymentRow).where(DeploymentRow.name == name)).one_or_none()
    if deployment is None or deployment.cluster != agent.cluster:
        raise NotFound(f'There is no deployment "{name}" in cluster {agent.cluster}.', field="name")
    _record_components(deployment, statuses)
    return Deployment.model_validate(deployment)


def _record_components(deployment: DeploymentRow, statuses: list[ComponentStatus]) -> None:
    deployment.components_status = [status.model_dump(mode="json") for status in statuses]
    deployment.components_status_at = utcnow()
