"""Why a task has not started, or waits while it runs: one rule for the API, the pages and the CLI.

A pending task waits for an agent of its cluster: none is connected, or every slot of those that are
is taken (a connected agent with a free slot claims a new task at once). A running task waits when
its Helm operation must wait for the one another task runs on the same release: Helm allows one
operation at a time per release.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from styrmin_backend.domain.tasks import TaskStatus

CONNECTED_WITHIN = timedelta(seconds=60)
"""An agent that called the server this recently counts as connected (it claims every few seconds)."""


class WaitReason(StrEnum):
    """What a task waits for."""

    NO_AGENT = "no-agent"
    NOT_CLAIMED = "not-claimed"
    SLOTS_TAKEN = "slots-taken"
    HELM_OPERATION = "helm-operation"


@dataclass(frozen=True)
class Waiting:
    """Why a task waits, as a sentence, and the task it waits for (for a Helm operation)."""

    reason: WaitReason
    message: str
    task_id: int | None = None


class AgentState(StrEnum):
    """Whether an agent serves its cluster now, as administrators see it."""

    CONNECTED = "connected"
    NOT_CONNECTED = "not-connected"
    NEVER_CONNECTED = "never-connected"
    REVOKED = "revoked"


def agent_state(
    *, revoked: bool, last_seen_at: datetime | None, processes_connected: int, now: datetime
) -> AgentState:
    """An agent's state: connected while one of its processes holds its presence connection, or
    while it called within ``CONNECTED_WITHIN`` (a process that polls through a server that has no
    presence connection of it, such as one that restarted a moment ago)."""
    if revoked:
        return AgentState.REVOKED
    if processes_connected or (last_seen_at is not None and now - last_seen_at <= CONNECTED_WITHIN):
        return AgentState.CONNECTED
    return AgentState.NEVER_CONNECTED if last_seen_at is None else AgentState.NOT_CONNECTED


def why_task_waits(
    status: TaskStatus,
    cluster: str,
    *,
    agents_connected: int,
    tasks_running: int,
    helm_of_task_id: int | None,
) -> Waiting | None:
    """Why a task of ``cluster`` with ``status`` waits; None when it does not (it runs, or it ended).

    Args:
        agents_connected: the agents of the cluster connected now (:func:`agent_state`).
        tasks_running: the cluster's running tasks that hold an agent slot.
        helm_of_task_id: the task whose Helm operation on the same release the task waits for.
    """
    if status is TaskStatus.PENDING:
        if agents_connected == 0:
            return Waiting(
                WaitReason.NO_AGENT,
                f'No agent of cluster "{cluster}" is connected (none has a process connected to a server, '
                f"nor called one in the last {CONNECTED_WITHIN.seconds} s); it starts once one is. "
                "Start the agent, or read its logs.",
            )
        if tasks_running == 0:
            # A connected agent with a free slot claims at once: one that does not is waiting itself.
            return Waiting(
                WaitReason.NOT_CLAIMED,
                f'An agent of cluster "{cluster}" is connected but has not claimed it yet; it starts once '
                "the agent claims it. An agent claims no task while its Prefect server or its cluster "
                "does not answer, or while it stops: read its logs.",
            )
        return Waiting(
            WaitReason.SLOTS_TAKEN,
            f'All slots of the agents of cluster "{cluster}" are taken ({tasks_running} task(s) '
            "running); it starts when one of them ends.",
        )
    if status is TaskStatus.RUNNING and helm_of_task_id is not None:
        return Waiting(
            WaitReason.HELM_OPERATION,
            f"Waits for the Helm operation of task {helm_of_task_id} on the same release to end "
            "(Helm runs one operation at a time per deployment).",
            helm_of_task_id,
        )
    return None
