"""Read models of tasks and their steps: what the interfaces show of them, never their rows."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from styrmin_backend.domain.waiting import Waiting
from styrmin_backend.services.read_model import ReadModel


class Task(ReadModel):
    """A task as recorded: what it does to which deployment, who asked, how far it got, what started it."""

    id: int
    type: str
    status: str
    deployment_id: int | None
    deployment_name: str
    change_id: int | None
    revision: int | None
    requested_by: str
    created_at: datetime
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    result: dict[str, Any] | None
    parent_task_id: int | None
    parent_step_id: int | None
    cluster: str
    claimed_by: int | None
    lease_expires_at: datetime | None
    actions_token_id: int | None
    cancelled_by: str | None = None
    cancelled_at: datetime | None = None
    stopped_at: datetime | None = None
    waits_for_helm_of_task_id: int | None = None
    waiting: Waiting | None = None
    """Why it waits (see ``domain.waiting``), when the read asked for it; None otherwise."""


class Step(ReadModel):
    """A step of a task: its place and name, how it went, the kept end of its output, its notes."""

    id: int
    task_id: int
    position: int
    name: str
    status: str
    started_at: datetime | None
    ended_at: datetime | None
    error: str | None
    output_tail: str | None
    output_truncated: bool
    notes: list[Any]
    flow_run_id: str | None
