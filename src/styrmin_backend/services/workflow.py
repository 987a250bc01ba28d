"""Recording a task's progress: start, steps, notes, output, end (the agent's side of a task).

Every error, note and output stored here goes through :func:`redact` first: users of every role read them.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from styrmin_backend.clock import utcnow
from styrmin_backend.domain.errors import NotFound
from styrmin_backend.domain.redaction import redact
from styrmin_backend.domain.secrets import secret_values
from styrmin_backend.domain.tasks import (
    ChildTaskResult,
    Step,
    StepStatus,
    Task,
    TaskStatus,
    TaskType,
    rollup_result,
)
from styrmin_backend.services import task_models
from styrmin_backend.store.db import read_for_update
from styrmin_backend.store.models import ChangeRow, DeploymentRow, StepRow, TaskRow


def _task_row(session: Session, task_id: int) -> TaskRow:
    row = read_for_update(session, TaskRow, task_id)
    if row is None:
        raise NotFound(f"There is no task {task_id}.", field="task_id")
    return row


def _step_row(session: Session, step_id: int) -> StepRow:
    row = read_for_update(session, StepRow, step_id)
    if row is None:
        raise NotFound(f"There is no step {step_id}.", field="step_id")
    return row


def secrets_of_task(session: Session, task: TaskRow) -> set[str]:
    """The secret values of the configuration task ``task`` carries out (its change's, else its
    deployment's): to redact wherever they appear in what it records, as a command or Helm quotes them."""
    configuration: Any = None
    if task.change_id is not None:
        change = session.get(ChangeRow, task.change_id)
        configuration = (change.spec if change is not None else {}).get("configuration")
    if configuration is None and task.deployment_id is not None:
        deployment = session.get(DeploymentRow, task.deployment_id)
        configuration = deployment.configuration if deployment is not None else None
    return secret_values(configuration) if configuration else set()


def _redacted(session: Session, task_id: int, text: str) -> str:
    """``text`` (a step's error, note or output, a task's error) as task ``task_id`` records it."""
    if not text:
        return text
    task = session.get(TaskRow, task_id)
    return redact(text, secrets_of_task(session, task) if task is not None else ())


def task_of_step(session: Session, step_id: int) -> int:
    """The task step ``step_id`` belongs to; raises NotFound."""
    task_id = session.scalar(select(StepRow.task_id).where(StepRow.id == step_id))
    if task_id is None:
        raise NotFound(f"There is no step {step_id}.", field="step_id")
    return task_id


def _step(row: StepRow) -> Step:
    return Step(
        name=row.name,
        status=StepStatus(row.status),
        started_at=row.started_at,
        ended_at=row.ended_at,
        error=row.error,
        output_tail=row.output_tail,
        output_truncated=row.output_truncated,
        notes=list(row.notes),
    )


def _write_step(step: Step, row: StepRow) -> None:
    row.status = step.status.value
    row.started_at = step.started_at
    row.ended_at = step.ended_at
    row.error = step.error


def _task(row: TaskRow, steps: list[StepRow]) -> Task:
    return Task(
        type=TaskType(row.type),
        status=TaskStatus(row.status),
        requested_by=row.requested_by,
        created_at=row.created_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
        error=row.error,
        steps=[_step(s) for s in steps],
        parent_task_id=row.parent_task_id,
        parent_step_id=row.parent_step_id,
    )


# Built once: each task's start and end read them (see services.agents).
_STEPS = select(StepRow).where(StepRow.task_id == bindparam("task")).order_by(StepRow.position)
_CHILDREN = select(TaskRow).where(TaskRow.parent_task_id == bindparam("task")).order_by(TaskRow.id)


def steps_of(session: Session, task_id: int) -> list[StepRow]:
    """The steps of task ``task_id``, in order."""
    return list(session.scalars(_STEPS, {"task": task_id}))


def started_tasks(session: Session, task_id: int) -> list[TaskRow]:
    """The tasks that the actions of task ``task_id`` started, oldest first."""
    return list(session.scalars(_CHILDREN, {"task": task_id}))


def start_task(session: Session, task_id: int) -> TaskRow:
    """Mark a pending task running."""
    row = _task_row(session, task_id)
    task = _task(row, [])
    task.start(utcnow())
    row.status, row.started_at = task.status.value, task.started_at
    return row


def add_step(
    session: Session, task_id: int, name: str, *, started: bool = True, position: int | None = None
) -> task_models.Step:
    """Append a step named ``name`` to a task (running unless ``started`` is False); ``position`` is
    the one after the task's last step, when the caller read that step already."""
    _task_row(session, task_id)
    if position is None:
        position = len(steps_of(session, task_id))
    step = Step(name=name)
    if started:
        step.start(utcnow())
    row = StepRow(
        task_id=task_id,
        position=position,
        name=name,
        status=step.status.value,
        started_at=step.started_at,
        notes=[],
        output_truncated=False,
    )
    session.add(row)
    session.flush()
    return task_models.Step.model_validate(row)


def add_step_note(session: Session, step_id: int, note: str) -> task_models.Step:
    """Add a note to a step (for example the line naming a deleted Job)."""
    row = _step_row(session, step_id)
    row.notes = [*row.notes, _redacted(session, row.task_id, note)]
    return task_models.Step.model_validate(row)


def set_step_output(
    session: Session, step_id: int, output_tail: str, output_truncated: bool
) -> task_models.Step:
    """Store the kept end of a failed command's output on a step."""
    row = _step_row(session, step_id)
    row.output_tail = _redacted(session, row.task_id, output_tail)
    row.output_truncated = output_truncated
    return task_models.Step.model_validate(row)


def end_step(session: Session, step_id: int, *, error: str | None = None) -> task_models.Step:
    """End a step: failed with ``error``, or succeeded when there is none. A step ends once."""
    row = _step_row(session, step_id)
    step = _step(row)
    if error is None:
        step.succeed(utcnow())
    else:
        step.fail(utcnow(), _redacted(session, row.task_id, error))
    _write_step(step, row)
    return task_models.Step.model_validate(row)


def end_task(
    session: Session,
    task_id: int,
    *,
    error: str | None = None,
    result: dict[str, Any] | None = None,
    unended: str | None = None,
) -> TaskRow:
    """End a task; it succeeds only when all its steps did. Its result lists the tasks it started.

    With ``unended``, each step that has not ended ends first, failed with that error.
    """
    row = _task_row(session, task_id)
    steps = steps_of(session, task_id)
    if unended is not None:
        for step in steps:
            if step.status in (StepStatus.RUNNING.value, StepStatus.PENDING.value):
                end_step(session, step.id, error=unended)
    task = _task(row, steps)
    if error is None:
        task.succeed(utcnow())
    else:
        task.fail(utcnow(), _redacted(session, task_id, error))
    children = _child_results(session, task_id, steps)
    row.status, row.started_at, row.ended_at, row.error = (
        task.status.value,
        task.started_at,
        task.ended_at,
        task.error,
    )
    row.result = rollup_result(result, children)
    return row


def cancel_task(session: Session, task_id: int, *, error: str, by: str) -> TaskRow:
    """End a task not yet ended as cancelled by ``by``, with its steps not yet ended; raises
    InvalidTransition when it has ended. Its result lists the tasks it started, as at any end."""
    row = _task_row(session, task_id)
    steps = steps_of(session, task_id)
    task = _task(row, steps)
    now = utcnow()
    task.cancel(now)
    for step, step_row in zip(task.steps, steps, strict=True):
        _write_step(step, step_row)
    row.status, row.started_at, row.ended_at = task.status.value, task.started_at, task.ended_at
    row.error = _redacted(session, task_id, error)
    row.cancelled_by, row.cancelled_at = by, now
    row.waits_for_helm_of_task_id = None
    row.result = rollup_result(row.result, _child_results(session, task_id, steps))
    return row


def _child_results(session: Session, task_id: int, steps: list[StepRow]) -> list[ChildTaskResult]:
    names = {s.id: s.name for s in steps}
    return [
        ChildTaskResult(
            task_id=child.id,
            type=TaskType(child.type),
            status=TaskStatus(child.status),
            step_name=names.get(child.parent_step_id or 0, ""),
            result=child.result,
        )
        for child in started_tasks(session, task_id)
    ]


def set_step_flow_run(session: Session, step_id: int, flow_run_id: str) -> StepRow:
    """Record the Prefect flow run of the action a step runs (the task view links to it)."""
    row = _step_row(session, step_id)
    row.flow_run_id = flow_run_id
    return row
