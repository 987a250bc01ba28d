"""The agent's side of the API: claim tasks with a lease, record steps, end tasks.

An agent authenticates with its key. The actions of a reconciliation may also record notes and
output on the steps of their own task, with the styrmin-actions token of that reconciliation.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Path, Query, Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field
from sqlalchemy.orm import Session

from styrmin_backend.api.deps import (
    AppSettings,
    api_router,
    app_transaction,
    authenticate_request,
    bearer_token,
    short_transaction,
)
from styrmin_backend.api.schemas import (
    AGENT_INSTANCE_PATTERN,
    MAX_ID,
    ClaimOut,
    ClaimRequest,
    ComponentsStatusRequest,
    DeploymentOut,
    StepCreateRequest,
    StepEndRequest,
    StepFlowRunRequest,
    StepNoteRequest,
    StepOutputRequest,
    StepRef,
    Strict,
    TaskEndRequest,
    TaskSummary,
)
from styrmin_backend.browser_session import SESSION_COOKIE
from styrmin_backend.clock import utcnow
from styrmin_backend.domain.errors import NotAllowed, NotAuthenticated, TooManyAttempts
from styrmin_backend.domain.outages import PRESENCE_HEARTBEAT_SECONDS
from styrmin_backend.metrics import observe_agent_process_gone, observe_claim, observe_step
from styrmin_backend.protocol import ClaimedStep, HelmLockAnswer, HelmLockRequest
from styrmin_backend.services import agents, backup_locations, cancel, drivers, helm_locks, workflow
from styrmin_backend.services.agents import AgentIdentity
from styrmin_backend.services.task_models import Step

router = api_router(prefix="/agent", tags=["agent"])
IdParam = Annotated[int, Path(ge=1, le=MAX_ID)]


def _agent_by_key(db: Session, key: str | None) -> AgentIdentity:
    """The agent whose key ``key`` is (an ``Authorization: Bearer`` token)."""
    return agents.authenticate_agent(db, _agent_key(key))


def _agent_key(key: str | None) -> str:
    if key is None or not key.startswith(agents.AGENT_KEY_PREFIX):
        raise NotAuthenticated("Send the agent key as 'Authorization: Bearer sta_...'.")
    return key


async def agent_key(request: Request) -> str:
    """The agent key the request carries, refused (401) before its body is read when there is none;
    :func:`_as_agent` checks it against the database."""
    return _agent_key(bearer_token(request))


AgentKey = Annotated[str, Depends(agent_key)]
_Answer = TypeVar("_Answer")


async def _as_agent(key: str, request: Request, work: Callable[[Session, AgentIdentity], _Answer]) -> _Answer:
    """Authenticate the agent of ``key`` and do ``work`` for it in one transaction, in one worker thread.

    An agent sends a few of these calls for every task. With the session and the agent as
    dependencies, the session's start, the authentication, the route and the commit each took a hop
    to a worker thread and back, which cost the server as much as a statement each.
    """

    def run() -> _Answer:
        with short_transaction(request) as db:
            return work(db, agents.authenticate_agent(db, key))

    return await run_in_threadpool(run)


def _writable_step(request: Request, db: Session, step_id: int) -> int:
    """``step_id`` if the caller may write it: the agent holding its task, or that reconciliation's actions."""
    key = bearer_token(request)
    agent = None
    principal = None
    if key is not None and key.startswith(agents.AGENT_KEY_PREFIX):
        agent = agents.authenticate_agent(db, key)
    else:
        principal = authenticate_request(request, db)
        if principal.actions_task_id is None:
            raise NotAllowed("Only an agent, or the actions of a reconciliation, may write to a step.")
    task_id = workflow.task_of_step(db, step_id)
    if agent is not None:
        agents.held_task(db, agent, task_id)
        return step_id
    assert principal is not None
    if principal.actions_task_id != task_id:
        raise NotAllowed(
            f"Step {step_id} belongs to task {task_id}; only the agent running it and that "
            "reconciliation's actions may write to it."
        )
    return step_id


@router.post("/claim", response_model=ClaimOut, responses={204: {"description": "Nothing to do now."}})
async def claim(body: ClaimRequest, request: Request, settings: AppSettings) -> ClaimOut | Response:
    """Claim the oldest pending task of the agent's cluster, with a lease to renew.

    With ``wait_seconds``, the answer waits up to that long for a task to arrive (a long poll), so
    a new change starts at once without the agent asking many times a second. On PostgreSQL the
    wait ends when the database announces a new task of the cluster (LISTEN/NOTIFY); on SQLite, when
    a commit of this server makes one claimable.
    """
    wakeups = request.app.state.claim_wakeups  # store.claim_wakeups.ClaimWakeups, made by server_app
    key = bearer_token(request)

    def attempt() -> tuple[ClaimOut | None, str]:
        with short_transaction(request) as db:
            agent = _agent_by_key(db, key)
            claimed = agents.claim_next_task(
                db,
                agent,
                lease=body.lease,
                token_lifetime=settings.actions_token_lifetime,
                started_by_actions_only=body.started_by_actions_only,
                plan_version=body.plan_version,
                instance=body.instance,
            )
            if claimed is None:
                return None, agent.cluster
            helm_lock = None
            if body.helm_lock_lease_seconds is not None:
                lease = timedelta(seconds=body.helm_lock_lease_seconds)
                helm_lock = helm_locks.take_with_claim(db, agent, claimed, lease)
            observe_claim(claimed.task.created_at, claimed.task.started_at)
            return ClaimOut(
                task=TaskSummary.model_validate(claimed.task),
                change_type=claimed.task.type,
                change=claimed.change,
                deployment=DeploymentOut.of(claimed.deployment, with_secrets=True),
                actions_token=claimed.actions_token,
                styrmin_url=settings.effective_public_url,
                first_step=(
                    ClaimedStep(id=claimed.first_step.id, name=claimed.first_step.name)
                    if claimed.first_step
                    else None
                ),
                helm_lock=helm_lock,
            ), agent.cluster

    deadline = time.monotonic() + body.wait_seconds
    stopping = request.app.state.stopping
    while not stopping.is_set():
        mark = wakeups.mark()
        found, cluster = await run_in_threadpool(attempt)
        if found is not None:
            return found
        if stopping.is_set() or time.monotonic() >= deadline or await request.is_disconnected():
            return Response(status_code=204)
        await wakeups.wait(cluster, mark, deadline - time.monotonic())
    return Response(status_code=204)


MAX_PRESENCE_CONNECTIONS = 64
"""The most presence connections one agent may hold open on one server: each holds a socket and a
coroutine for as long as it lasts, and one agent process needs one."""
PRESENCE = "presence"
"""The key of the presence connections' wake-ups (``app.state.presence_waiters``)."""
InstanceParam = Annotated[str, Path(pattern=AGENT_INSTANCE_PATTERN)]
log = logging.getLogger("styrmin.agents")


@router.get(
    "/instances/{instance}/presence",
    response_class=StreamingResponse,
    responses={200: {"content": {"application/x-ndjson": {}}, "description": "Heartbeats, a line each."}},
)
async def presence(
    instance: InstanceParam, key: AgentKey, request: Request, settings: AppSettings
) -> Response:
    """Hold a connection open for as long as the agent's process (its ``instance``) runs.

    The answer never ends while the server serves: a JSON line now (how often lines come), then
    ``{}`` every 15 s. When the connection closes and the instance does not open another within
    ``agent_gone_seconds`` (on any server of the database), the tasks it claimed end failed and
    their Helm locks are let go of: a crashed or killed agent's changes fail in seconds, where
    their leases would run on. A stopping server ends these answers and judges no one.
    """
    app, stopping = request.app, request.app.state.stopping
    open_now: Counter[int] = app.state.presence_open

    def connect(db: Session, agent: AgentIdentity) -> tuple[AgentIdentity, int]:
        if open_now[agent.id] >= MAX_PRESENCE_CONNECTIONS:
            raise TooManyAttempts(
                f"Agent {agent.name} holds {open_now[agent.id]} presence connections open on this server "
                f"already (at most {MAX_PRESENCE_CONNECTIONS}); close some first: one per process is enough.",
                retry_after=int(PRESENCE_HEARTBEAT_SECONDS),
                field="instance",
            )
        return agent, agents.connect_instance(db, agent, instance)

    agent, connection = await _as_agent(key, request, connect)
    waiters = app.state.presence_waiters  # store.wakeups.Waiters, woken when the server stops

    def note_seen() -> None:
        with app_transaction(app) as db:
            agents.note_instance_seen(db, agent, instance, connection)

    async def lines() -> AsyncIterator[str]:
        first = {
            "heartbeat_seconds": PRESENCE_HEARTBEAT_SECONDS,
            "gone_after_seconds": settings.agent_gone_seconds,
        }
        open_now[agent.id] += 1
        try:
            yield json.dumps(first) + "\n"
            while not stopping.is_set():
                mark = waiters.mark()
                if stopping.is_set():
                    break
                await waiters.wait(PRESENCE, mark, PRESENCE_HEARTBEAT_SECONDS)
                if not stopping.is_set():
                    try:  # for the lists of the agent's processes (services.agents.list_agents)
                        await run_in_threadpool(note_seen)
                    except Exception as error:  # the database is away, say: the connection holds on
                        log.debug(
                            "Could not note a heartbeat of %s's process %s: %s", agent.name, instance, error
                        )
                yield "{}\n"
        finally:
            open_now[agent.id] -= 1
            if not stopping.is_set():  # the agent's side closed it (or the network between)
                _judge_later(app, agent, instance, connection, utcnow())

    return StreamingResponse(lines(), media_type="application/x-ndjson")


def _judge_later(app: Any, agent: AgentIdentity, instance: str, connection: int, closed_at: datetime) -> None:
    """In ``agent_gone_seconds``, end the tasks of ``instance`` if it did not connect again."""
    grace = timedelta(seconds=app.state.settings.agent_gone_seconds)

    def judge() -> list[int] | None:
        with app_transaction(app) as db:
            ended = agents.end_tasks_of_a_gone_instance(db, agent, instance, connection, closed_at, grace)
            helm_locks.release_helm_locks_of_tasks(db, agent, ended or [])
            return ended

    async def later() -> None:
        await asyncio.sleep(grace.total_seconds())
        if app.state.stopping.is_set():
            return
        try:
            ended = await run_in_threadpool(judge)
        except Exception as error:  # the database is away, say: the tasks' leases decide instead
            log.warning(
                "Could not judge whether agent %s's process %s went away: %s", agent.name, instance, error
            )
            return
        who = f"Agent {agent.name}'s process {instance}"
        if ended is not None:
            observe_agent_process_gone(agent.name, with_tasks=bool(ended))
        if ended is None:
            log.info("%s closed a presence connection and connected again (or is not known)", who)
        elif ended:
            log.warning(
                "%s closed its connection at %s and did not connect again within %g s; the tasks it ran "
                "ended failed: %s",
                who,
                closed_at.isoformat(timespec="seconds"),
                grace.total_seconds(),
                ended,
            )
        else:
            log.info("%s went away (its presence connection closed); it ran no task", who)

    judging: set[asyncio.Task[None]] = app.state.presence_judgements
    task = asyncio.get_running_loop().create_task(later())
    judging.add(task)
    task.add_done_callback(judging.discard)


@router.post("/tasks/{task_id}/lease", response_model=TaskSummary)
async def renew_lease(task_id: IdParam, body: ClaimRequest, key: AgentKey, request: Request) -> TaskSummary:
    """Renew the lease of a task the agent is running."""

    def work(db: Session, agent: AgentIdentity) -> TaskSummary:
        return TaskSummary.model_validate(agents.renew_lease(db, agent, task_id, body.lease))

    return await _as_agent(key, request, work)


@router.post("/tasks/{task_id}/steps", response_model=StepRef, status_code=201)
async def add_step(task_id: IdParam, body: StepCreateRequest, key: AgentKey, request: Request) -> StepRef:
    """Start the next step of a task the agent is running (sent again, it answers the same step)."""

    def work(db: Session, agent: AgentIdentity) -> StepRef:
        return StepRef.model_validate(agents.add_held_task_step(db, agent, task_id, body.name))

    return await _as_agent(key, request, work)


@router.post("/tasks/{task_id}/end", response_model=TaskSummary)
async def end_task(task_id: IdParam, body: TaskEndRequest, key: AgentKey, request: Request) -> TaskSummary:
    """End a task: failed with an error, or succeeded. Its actions token is revoked.

    With ``components``, the deployment's component workloads are recorded too, with
    ``last_step_id`` the task's last step ends succeeded first, and with ``release_helm_locks`` the
    task's Helm locks are let go of: one call instead of four.
    """

    def work(db: Session, agent: AgentIdentity) -> TaskSummary:
        ended = agents.end_claimed_task(
            db,
            agent,
            task_id,
            error=body.error,
            result=(body.result.as_json() if body.result else None) or None,
            components=body.components,
            last_step_id=body.last_step_id,
        )
        if body.release_helm_locks:  # in the same transaction: a refused end lets go of nothing
            helm_locks.release_task_helm_locks(db, agent, task_id)
        return TaskSummary.model_validate(ended)

    return await _as_agent(key, request, work)


@router.post("/tasks/{task_id}/helm-lock", response_model=HelmLockAnswer)
async def acquire_helm_lock(
    task_id: IdParam, body: HelmLockRequest, key: AgentKey, request: Request
) -> HelmLockAnswer:
    """Take the lock of a release's Helm operation for a task the agent runs, if no other task holds it.

    ``acquired`` false names the task that holds it; the agent asks again until it gets it (410 when
    the task was cancelled meanwhile).
    """
    lease = timedelta(seconds=body.lease_seconds)

    def work(db: Session, agent: AgentIdentity) -> HelmLockAnswer:
        return helm_locks.acquire_helm_lock(db, agent, task_id, body.namespace, body.release, lease)

    return await _as_agent(key, request, work)


@router.post("/tasks/{task_id}/helm-lock/renew", status_code=204)
async def renew_helm_lock(
    task_id: IdParam, body: HelmLockRequest, key: AgentKey, request: Request
) -> Response:
    """Extend the lease of a Helm lock the task holds while its Helm operation runs (409 when lost)."""
    lease = timedelta(seconds=body.lease_seconds)

    def work(db: Session, agent: AgentIdentity) -> None:
        helm_locks.renew_helm_lock(db, agent, task_id, body.namespace, body.release, lease)

    await _as_agent(key, request, work)
    return Response(status_code=204)


@router.post("/tasks/{task_id}/helm-lock/release", status_code=204)
async def release_helm_lock(
    task_id: IdParam, body: HelmLockRequest, key: AgentKey, request: Request
) -> Response:
    """Let go of a Helm lock once the task's Helm operation ended (nothing when it holds none)."""

    def work(db: Session, agent: AgentIdentity) -> None:
        helm_locks.release_helm_lock(db, agent, task_id, body.namespace, body.release)

    await _as_agent(key, request, work)
    return Response(status_code=204)


class CancelledInPrefectRequest(Strict):
    flow_run_id: str = Field(max_length=64, description="The flow run that was cancelled in the Prefect UI.")


@router.post("/tasks/{task_id}/cancelled-in-prefect", response_model=TaskSummary)
async def cancelled_in_prefect(
    task_id: IdParam, body: CancelledInPrefectRequest, key: AgentKey, request: Request
) -> TaskSummary:
    """Cancel a task the agent runs because a flow run of its actions was cancelled in the Prefect UI."""

    def work(db: Session, agent: AgentIdentity) -> TaskSummary:
        agents.held_task(db, agent, task_id)
        return TaskSummary.model_validate(
            cancel.cancel_task(db, task_id, by=cancel.prefect_canceller(body.flow_run_id))
        )

    return await _as_agent(key, request, work)


@router.post("/tasks/{task_id}/stopped", status_code=204)
async def work_stopped(task_id: IdParam, key: AgentKey, request: Request) -> Response:
    """Say that the agent stopped the work of a cancelled task (its running action ended)."""

    def work(db: Session, agent: AgentIdentity) -> None:
        cancel.record_work_stopped(db, task_id, agent.id)

    await _as_agent(key, request, work)
    return Response(status_code=204)


async def step_writer(request: Request) -> None:
    """Refuse (401) a write to a step that carries no credentials, before its body is read;
    :func:`_writable_step` checks them."""
    if bearer_token(request) is None and not request.cookies.get(SESSION_COOKIE):
        raise NotAuthenticated("Send the agent key, or the actions token, as 'Authorization: Bearer ...'.")


async def _on_writable_step(
    request: Request, step_id: int, work: Callable[[Session, int], StepRef]
) -> StepRef:
    """Do ``work`` on step ``step_id`` if the caller may write it, in one transaction and one worker
    thread (see :func:`_as_agent`)."""

    def run() -> StepRef:
        with short_transaction(request) as db:
            return work(db, _writable_step(request, db, step_id))

    return await run_in_threadpool(run)


@router.post("/steps/{step_id}/notes", response_model=StepRef)
async def add_note(
    step_id: IdParam, body: StepNoteRequest, request: Request, _: Annotated[None, Depends(step_writer)]
) -> StepRef:
    """Add a note to a step (for example the line naming a deleted Job)."""

    def work(db: Session, writable: int) -> StepRef:
        return StepRef.model_validate(agents.add_note_once(db, writable, body.note))

    return await _on_writable_step(request, step_id, work)


@router.put("/steps/{step_id}/output", response_model=StepRef)
async def set_output(
    step_id: IdParam, body: StepOutputRequest, request: Request, _: Annotated[None, Depends(step_writer)]
) -> StepRef:
    """Store the kept end of a failed command's output on a step."""

    def work(db: Session, writable: int) -> StepRef:
        step = workflow.set_step_output(db, writable, body.output_tail, body.output_truncated)
        return StepRef.model_validate(step)

    return await _on_writable_step(request, step_id, work)


@router.put("/steps/{step_id}/flow-run", response_model=StepRef)
async def set_flow_run(
    step_id: IdParam, body: StepFlowRunRequest, key: AgentKey, request: Request
) -> StepRef:
    """Record the Prefect flow run that runs the step's action."""

    def work(db: Session, agent: AgentIdentity) -> StepRef:
        agents.held_task(db, agent, workflow.task_of_step(db, step_id))
        return StepRef.model_validate(workflow.set_step_flow_run(db, step_id, body.flow_run_id))

    return await _as_agent(key, request, work)


@router.post("/steps/{step_id}/end", response_model=StepRef)
async def end_step(step_id: IdParam, body: StepEndRequest, key: AgentKey, request: Request) -> StepRef:
    """End a step: failed with an error, or succeeded (sent again, it answers the step as it ended)."""

    def work(db: Session, agent: AgentIdentity) -> Step:
        return agents.end_held_step(db, agent, step_id, body.error)

    step = await _as_agent(key, request, work)
    observe_step(step.status, step.started_at, step.ended_at)
    return StepRef.model_validate(step)


@router.get(
    "/drivers/{name}/versions/{version}/archive",
    response_class=Response,
    responses={200: {"content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}}},
)
async def download_driver(
    name: Annotated[str, Path(max_length=64)],
    version: Annotated[str, Path(max_length=64)],
    key: AgentKey,
    request: Request,
) -> Response:
    """A driver version's .tar.gz for the agent (its checksum is in the ETag)."""

    def work(db: Session, _agent: AgentIdentity) -> Response:
        row = drivers.get_driver(db, name, version)
        return Response(row.archive, media_type="application/gzip", headers={"ETag": f'"{row.checksum}"'})

    return await _as_agent(key, request, work)


@router.put("/deployments/{name}/components", response_model=DeploymentOut)
async def report_components(
    name: Annotated[str, Path(max_length=53)], body: ComponentsStatusRequest, key: AgentKey, request: Request
) -> DeploymentOut:
    """Record the component workloads of a deployment of the agent's cluster, as the agent sees them."""

    def work(db: Session, agent: AgentIdentity) -> DeploymentOut:
        return DeploymentOut.of(agents.report_components(db, agent, name, body.components))

    return await _as_agent(key, request, work)


class LocationCheckOut(BaseModel):
    id: int
    location: dict[str, Any] = Field(description="The location, with only the reference of its Secret.")


class LocationCheckRequest(Strict):
    error: str | None = Field(default=None, max_length=4000, description="What failed; null when it passed.")


MAX_LOCATION_WAIT_SECONDS = 30.0
"""The longest an agent's ask for the next backup location check waits for one."""


@router.get(
    "/backup-location-checks",
    response_model=LocationCheckOut,
    responses={204: {"description": "No location waits for a check."}},
)
async def next_location_check(
    request: Request,
    wait_seconds: Annotated[
        float,
        Query(
            ge=0,
            le=MAX_LOCATION_WAIT_SECONDS,
            description="Answer once a location waits for its check, or after this many seconds (a long poll).",
        ),
    ] = 0,
) -> LocationCheckOut | Response:
    """The oldest backup location of the agent's cluster waiting for its check.

    With ``wait_seconds``, the answer waits up to that long for one (a long poll): a location an
    administrator sets is checked at once, and an idle agent asks a few times a minute.
    """
    key = bearer_token(request)

    def attempt() -> tuple[LocationCheckOut | None, str]:
        with short_transaction(request) as db:
            agent = _agent_by_key(db, key)
            row = backup_locations.next_location_check(db, agent.cluster)
            found = None if row is None else LocationCheckOut(id=row.id, location=row.location)
            return found, agent.cluster

    # Another server process's commit wakes no one here: on a shared database, look again each second.
    poll = 1.0 if request.app.state.claim_wakeups.shared_database else MAX_LOCATION_WAIT_SECONDS
    deadline = time.monotonic() + wait_seconds
    stopping = request.app.state.stopping
    waiters = request.app.state.location_waiters  # store.wakeups.Waiters, made by server_app
    while True:
        mark = waiters.mark()
        found, cluster = await run_in_threadpool(attempt)
        if found is not None:
            return found
        left = deadline - time.monotonic()
        if left <= 0 or stopping.is_set() or await request.is_disconnected():
            return Response(status_code=204)
        await waiters.wait(cluster, mark, min(poll, left))
        if time.monotonic() >= deadline:  # not woken: the next ask looks again
            return Response(status_code=204)


@router.post("/backup-location-checks/{location_id}", status_code=204)
async def record_location_check(
    location_id: IdParam, body: LocationCheckRequest, key: AgentKey, request: Request
) -> Response:
    """Record how the agent's check of a backup location went."""

    def work(db: Session, agent: AgentIdentity) -> None:
        backup_locations.record_location_check(db, agent.cluster, location_id, body.error)

    await _as_agent(key, request, work)
    return Response(status_code=204)
