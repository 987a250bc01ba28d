"""The rules of tasks and steps, without any I/O."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from styrmin_backend.domain.errors import InvalidTransition
from styrmin_backend.domain.hooks import Hook, Mode, hook_has_driver_core, hook_step_name
from styrmin_backend.domain.tasks import ChildTaskResult, Step, Task, TaskStatus, TaskType, rollup_result

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_step_names_are_the_documented_ones() -> None:
    assert hook_step_name(Hook.SETUP, Mode.PRE) == "Run the setup pre-hook"
    assert hook_step_name(Hook.SETUP, Mode.POST) == "Run the setup post-hook"
    assert hook_step_name(Hook.UPGRADE, Mode.PRE) == "Run the upgrade pre-hook"
    assert hook_step_name(Hook.UPGRADE, Mode.CORE) == "Run the upgrade hook"
    assert hook_step_name(Hook.UPGRADE, Mode.POST) == "Run the upgrade post-hook"
    assert hook_step_name(Hook.BACKUP, Mode.PRE) == "Run the backup pre-hook"


def test_setup_core_belongs_to_styrmin() -> None:
    assert not hook_has_driver_core(Hook.SETUP)
    assert hook_has_driver_core(Hook.UPGRADE)


def test_a_step_ends_once() -> None:
    step = Step("Run the upgrade hook")
    step.start(NOW)
    step.fail(NOW, "boom")
    with pytest.raises(InvalidTransition, match="already ended as failed"):
        step.succeed(NOW)
    assert step.error == "boom"


def test_a_step_starts_once() -> None:
    step = Step("x")
    step.start(NOW)
    with pytest.raises(InvalidTransition):
        step.start(NOW)


def test_a_task_succeeds_only_when_every_step_did() -> None:
    ok, failed = Step("a"), Step("b")
    ok.succeed(NOW)
    failed.fail(NOW, "no")
    task = Task(TaskType.UPGRADE, steps=[ok, failed])
    task.start(NOW)
    with pytest.raises(InvalidTransition, match='"b" did not succeed'):
        task.succeed(NOW)
    assert task.status is TaskStatus.RUNNING
    task.fail(NOW, "b failed")
    assert task.status is TaskStatus.FAILED


def test_a_task_with_a_running_step_cannot_succeed() -> None:
    step = Step("a")
    step.start(NOW)
    task = Task(TaskType.CREATE, steps=[step])
    with pytest.raises(InvalidTransition):
        task.succeed(NOW)


def test_a_task_ends_once() -> None:
    task = Task(TaskType.CREATE)
    task.succeed(NOW)
    with pytest.raises(InvalidTransition, match="ends once"):
        task.fail(NOW, "late")
    assert task.status is TaskStatus.SUCCEEDED


def test_result_lists_the_tasks_its_steps_started() -> None:
    children = [
        ChildTaskResult(7, TaskType.STOP, TaskStatus.SUCCEEDED, "Run the upgrade hook"),
        ChildTaskResult(8, TaskType.UPGRADE, TaskStatus.FAILED, "Run the upgrade hook", {"x": 1}),
    ]
    result = rollup_result({"version": "2.0"}, children)
    assert result["version"] == "2.0"
    assert [(c["task_id"], c["type"], c["status"]) for c in result["started_tasks"]] == [
        (7, "stop", "succeeded"),
        (8, "upgrade", "failed"),
    ]
    assert result["started_tasks"][1]["result"] == {"x": 1}
