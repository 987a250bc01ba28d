"""A task's log: the log lines of its actions' Prefect flow runs and the stored output of their commands.

Read-only users may read it, as they read a step's output; every line is redacted first (the known
secret values of the change's configuration, and the common forms of secrets).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from styrmin_backend.domain.errors import InvalidInput, NotFound
from styrmin_backend.domain.hooks import MODE_ORDER, Hook, Mode, hook_step_name
from styrmin_backend.domain.redaction import redact
from styrmin_backend.domain.tasks import TaskStatus
from styrmin_backend.services import workflow
from styrmin_backend.store.models import StepRow, TaskRow

LOG_PAGE_MAX_LINES = 500
"""The most log lines one read returns; read on from ``next_offset``."""
LOG_LINE_MAX_CHARS = 4096
"""A longer log line is cut, saying so."""

_LEVELS = {10: "DEBUG", 20: "INFO", 30: "WARNING", 40: "ERROR", 50: "CRITICAL"}
_HOOK_STEPS = {hook_step_name(hook, mode): (hook, mode) for hook in Hook for mode in MODE_ORDER}


class PrefectUnreachable(Exception):
    """Prefect did not answer a log read; the message says where and what to do."""


@dataclass(frozen=True)
class FlowRunRef:
    """A flow run as Prefect lists it."""

    id: str
    name: str
    state: str


@dataclass(frozen=True)
class FlowRunLine:
    """A log line of a flow run as Prefect stores it."""

    flow_run_id: str
    timestamp: datetime
    level: int
    message: str


class FlowRunLogs(Protocol):
    """Where the flow runs of actions and their log lines are read (Prefect's API)."""

    def flow_runs(self, tags: Sequence[str], name_prefix: str) -> list[FlowRunRef]: ...

    def flow_run(self, flow_run_id: str) -> FlowRunRef | None: ...

    def lines(self, flow_run_ids: Sequence[str], offset: int, limit: int) -> list[FlowRunLine]: ...


@dataclass(frozen=True)
class LogSource:
    """A step of the task whose actions ran (or run) as flow runs, found by their name and tags."""

    position: int
    step_name: str
    hook: Hook
    mode: Mode
    flow_run_id: str | None


@dataclass(frozen=True)
class StepOutput:
    """The stored end of a failed command's output on a step."""

    position: int
    step_name: str
    output_tail: str
    output_truncated: bool


@dataclass(frozen=True)
class LogSources:
    """What a log read needs of the database, read in one short transaction."""

    task_id: int
    task_ended: bool
    deployment: str
    revision: int
    sources: list[LogSource]
    outputs: list[StepOutput]
    secrets: frozenset[str]


@dataclass(frozen=True)
class LogLine:
    """One log line of an action, redacted, with the step and action it belongs to."""

    position: int
    step_name: str
    action: str
    timestamp: datetime
    level: str
    message: str


@dataclass(frozen=True)
class TaskLogs:
    """A page of a task's log lines, from ``offset``; read on from ``next_offset``. ``complete`` is True
    once the task has ended and every line was read."""

    task_id: int
    lines: list[LogLine]
    next_offset: int
    complete: bool
    outputs: list[StepOutput] = field(default_factory=list)
    prefect_error: str | None = None


def log_sources(session: Session, task_id: int, step: int | None) -> LogSources:
    """The hook steps of task ``task_id`` (only step number ``step``, counted from 1, when given)."""
    task = session.get(TaskRow, task_id)
    if task is None:
        raise NotFound(f"There is no task {task_id}.", field="task_id")
    steps = list(
        session.scalars(select(StepRow).where(StepRow.task_id == task_id).order_by(StepRow.position))
    )
    if step is not None and not any(row.position + 1 == step for row in steps):
        raise InvalidInput(
            f"Task {task_id} has no step {step}; it has {len(steps)} step(s) so far "
            f"(see: styrminctl tasks get {task_id}).",
            field="step",
        )
    chosen = [row for row in steps if step is None or row.position + 1 == step]
    sources = [
        LogSource(row.position, row.name, *_HOOK_STEPS[row.name], row.flow_run_id)
        for row in chosen
        if row.name in _HOOK_STEPS
    ]
    outputs = [
        StepOutput(row.position, row.name, row.output_tail, row.output_truncated)
        for row in chosen
        if row.output_tail
    ]
    return LogSources(
        task_id=task_id,
        task_ended=TaskStatus(task.status).ended,
        deployment=task.deployment_name,
        revision=task.revision or 0,
        sources=sources,
        outputs=outputs,
        secrets=frozenset(workflow.secrets_of_task(session, task)),
    )


def _action_of(run: FlowRunRef, prefix: str) -> str:
    return run.name.removeprefix(prefix) or run.name


def read_task_logs(reader: FlowRunLogs, found: LogSources, offset: int, limit: int) -> TaskLogs:
    """The log lines of ``found``'s flow runs from ``offset``, at most ``limit``; the stored outputs."""
    limit = max(1, min(limit, LOG_PAGE_MAX_LINES))
    prefix = f"{found.deployment}-r{found.revision}-"
    runs: dict[str, tuple[LogSource, str]] = {}
    try:
        for source in found.sources:
            tags = [
                f"deployment:{found.deployment}",
                f"hook:{source.hook.value}",
                f"mode:{source.mode.value}",
            ]
            for run in reader.flow_runs(tags, prefix):
                runs[run.id] = (source, _action_of(run, prefix))
            if source.flow_run_id and source.flow_run_id not in runs:
                linked = reader.flow_run(source.flow_run_id)
                if linked is not None:
                    runs[linked.id] = (source, _action_of(linked, prefix))
        lines = reader.lines(list(runs), offset, limit)
    except PrefectUnreachable as error:
        return TaskLogs(found.task_id, [], offset, False, found.outputs, str(error))
    shown = [
        LogLine(
            position=runs[line.flow_run_id][0].position if line.flow_run_id in runs else -1,
            step_name=runs[line.flow_run_id][0].step_name if line.flow_run_id in runs else "",
            action=runs[line.flow_run_id][1] if line.flow_run_id in runs else "",
            timestamp=line.timestamp,
            level=_LEVELS.get(line.level, str(line.level)),
            message=_cut(redact(line.message, found.secrets)),
        )
        for line in lines
    ]
    next_offset = offset + len(lines)
    complete = found.task_ended and len(lines) < limit
    return TaskLogs(found.task_id, shown, next_offset, complete, found.outputs)


def _cut(message: str) -> str:
    if len(message) <= LOG_LINE_MAX_CHARS:
        return message
    return message[:LOG_LINE_MAX_CHARS] + " [line cut]"
