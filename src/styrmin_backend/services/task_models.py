"""Read models of tasks and their steps: what the interfaces show of them, never their rows."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from styrmin_backend.store.models import StepRow, TaskRow


@dataclass(frozen=True)
class Task:
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

    @classmethod
    def of(cls, row: TaskRow) -> Task:
        return cls(
            id=row.id,
            type=row.type,
            status=row.status,
            deployment_id=row.deployment_id,
            deployment_name=row.deployment_name,
            change_id=row.change_id,
            revision=row.revision,
            requested_by=row.requested_by,
            created_at=row.created_at,
            started_at=row.started_at,
            ended_at=row.ended_at,
            error=row.error,
            result=dict(row.result) if row.result is not None else None,
            parent_task_id=row.parent_task_id,
            parent_step_id=row.parent_step_id,
            cluster=row.cluster,
            claimed_by=row.claimed_by,
            lease_expires_at=row.lease_expires_at,
            actions_token_id=row.actions_token_id,
        )


@dataclass(frozen=True)
class Step:
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

    @classmethod
    def of(cls, row: StepRow) -> Step:
        return cls(
            id=row.id,
            task_id=row.task_id,
            position=row.position,
            name=row.name,
            status=row.status,
            started_at=row.started_at,
            ended_at=row.ended_at,
            error=row.error,
            output_tail=row.output_tail,
            output_truncated=row.output_truncated,
            notes=list(row.notes or []),
            flow_run_id=row.flow_run_id,
        )
