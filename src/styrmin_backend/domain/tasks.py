"""Tasks and their steps: statuses, the transitions between them, and the result rollup."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any

from styrmin_backend.domain.errors import InvalidTransition


class TaskType(StrEnum):
    """The kind of change a task carries out."""

    CREATE = "create"
    CONFIGURE = "configure"
    UPGRADE = "upgrade"
    STOP = "stop"
    START = "start"
    BACKUP = "backup"
    RESTORE = "restore"
    DELETE = "delete"
    DELETE_BACKUP = "delete-backup"


class TaskStatus(StrEnum):
    """Where a task is in its life."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    """Ended because a user (or the Prefect UI) cancelled it; the cluster was left as it was."""

    @property
    def ended(self) -> bool:
        """Whether the task has ended (succeeded, failed or cancelled)."""
        return self in _ENDED

    @property
    def unsuccessful(self) -> bool:
        """Whether it ended without succeeding (failed or cancelled): a retry may follow."""
        return self in (TaskStatus.FAILED, TaskStatus.CANCELLED)


StepStatus = TaskStatus
"""Steps move through the same statuses as tasks."""

_ENDED = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED})


@dataclass
class Step:
    """One step of a task, in order: what ran, how it ended, and what it left to read."""

    name: str
    status: StepStatus = StepStatus.PENDING
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    output_tail: str | None = None
    output_truncated: bool = False
    notes: list[str] = field(default_factory=list)
    child_task_ids: list[int] = field(default_factory=list)

    def start(self, now: datetime) -> None:
        """Mark the step running; a step starts once."""
        if self.status is not StepStatus.PENDING:
            raise InvalidTransition(f'Step "{self.name}" is {self.status}; only a pending step can start.')
        self.status = StepStatus.RUNNING
        self.started_at = now

    def succeed(self, now: datetime) -> None:
        """End the step as succeeded."""
        self._end(StepStatus.SUCCEEDED, now)

    def fail(self, now: datetime, error: str) -> None:
        """End the step as failed with ``error``."""
        self._end(StepStatus.FAILED, now)
        self.error = error

    def cancel(self, now: datetime) -> None:
        """End the step as cancelled (its task was cancelled while it ran or waited)."""
        self._end(StepStatus.CANCELLED, now)

    def _end(self, status: StepStatus, now: datetime) -> None:
        if self.status.ended:
            raise InvalidTransition(f'Step "{self.name}" already ended as {self.status}; a step ends once.')
        if self.started_at is None:
            self.started_at = now
        self.status = status
        self.ended_at = now


@dataclass
class Task:
    """The record of one change's workflow."""

    type: TaskType
    status: TaskStatus = TaskStatus.PENDING
    requested_by: str = ""
    created_at: datetime | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    error: str | None = None
    steps: list[Step] = field(default_factory=list)
    parent_task_id: int | None = None
    parent_step_id: int | None = None

    def start(self, now: datetime) -> None:
        """Mark the task running; a task starts once."""
        if self.status is not TaskStatus.PENDING:
            raise InvalidTransition(f"The task is {self.status}; only a pending task can start.")
        self.status = TaskStatus.RUNNING
        self.started_at = now

    def succeed(self, now: datetime) -> None:
        """End the task as succeeded: allowed only when every step succeeded."""
        unfinished = [s.name for s in self.steps if s.status is not StepStatus.SUCCEEDED]
        if unfinished:
            names = ", ".join(f'"{n}"' for n in unfinished)
            raise InvalidTransition(f"The task cannot succeed: steps {names} did not succeed.")
        self._end(TaskStatus.SUCCEEDED, now)

    def fail(self, now: datetime, error: str) -> None:
        """End the task as failed with ``error``."""
        self._end(TaskStatus.FAILED, now)
        self.error = error

    def cancel(self, now: datetime) -> None:
        """End the task as cancelled, with every step not yet ended; a task ends once."""
        if self.status.ended:
            raise InvalidTransition(
                f"The task already ended as {self.status}; only a task not ended can be cancelled."
            )
        for step in self.steps:
            if not step.status.ended:
                step.cancel(now)
        # A pending task never started: it keeps no start time, so no one reads it as half done.
        self._end(TaskStatus.CANCELLED, now, started=self.status is not TaskStatus.PENDING)

    def _end(self, status: TaskStatus, now: datetime, *, started: bool = True) -> None:
        if self.status.ended:
            raise InvalidTransition(f"The task already ended as {self.status}; a task ends once.")
        if self.started_at is None and started:
            self.started_at = now
        self.status = status
        self.ended_at = now


@dataclass(frozen=True)
class ChildTaskResult:
    """What a task that an action started ended with, as its parent's result lists it."""

    task_id: int
    type: TaskType
    status: TaskStatus
    step_name: str
    result: dict[str, Any] | None = None


def rollup_result(own: dict[str, Any] | None, children: list[ChildTaskResult]) -> dict[str, Any]:
    """A task's result: its own result plus the results of the tasks its steps started."""
    result = dict(own or {})
    result["started_tasks"] = [
        {
            "task_id": child.task_id,
            "type": child.type.value,
            "status": child.status.value,
            "step": child.step_name,
            "result": child.result,
        }
        for child in children
    ]
    return result
