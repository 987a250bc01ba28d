"""How failures of the primitives reach the hook step and the task, on the whole stack."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from styrmin_backend.domain.hooks import Hook, Mode
from styrmin_backend.domain.limits import OUTPUT_TAIL_MAX_BYTES, OUTPUT_TAIL_MAX_LINES, REDACTED
from styrmin_backend.testing import StyrminStack, describe, hook_step

from .conftest import action, push_example

pytestmark = pytest.mark.slow

ACTIONS = textwrap.dedent(
    """
    import os

    from prefect import flow

    from styrmin_backend.actions import GlobalContext, execute_commands


    @flow
    async def noisy_migration(context: GlobalContext, target_version: str) -> None:
        # 10 MB of output, the action's token among it, then the error and a failing exit code.
        script = (
            'yes "migrating rows, leaked $LEAK" | head -c 10485760; echo; '
            'echo "Migration 0042 failed: table users is locked" >&2; exit 5'
        )
        await execute_commands(
            ["sh", "-c", script],
            image=f"example.com/shop/server:{target_version}",
            context=context,
            env={"LEAK": os.environ["STYRMIN_TOKEN"]},
        )


    @flow
    async def binary_migration(context: GlobalContext, target_version: str) -> None:
        # Output with NUL bytes in it (a dump, a binary written to the terminal), then a failure.
        script = "printf 'row 1\\\\000 copied\\\\n'; echo 'Migration 0043 failed' >&2; exit 6"
        await execute_commands(
            ["sh", "-c", script], image=f"example.com/shop/server:{target_version}", context=context
        )
    """
)


@pytest.fixture(scope="module")
def drivers(stack: StyrminStack, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("drivers")
    push_example(stack, tmp, "1.1.0", actions=[])
    push_example(
        stack,
        tmp,
        "1.2.0",
        actions_source=ACTIONS,
        actions=[action("migrate", "upgrade", "pre", "noisy_migration")],
    )
    push_example(  # a version of its own: the stack, and its drivers, are shared by other modules
        stack,
        tmp,
        "43.0.0",
        actions_source=ACTIONS,
        actions=[action("migrate", "upgrade", "pre", "binary_migration")],
    )


def test_a_migration_failing_after_10_mb_of_output_stores_its_redacted_tail_on_the_step(
    stack: StyrminStack, drivers: None, deployment_name: str
) -> None:
    created = stack.create(deployment_name, driver="shop", driver_version="1.1.0")
    assert created.status == "succeeded", describe(created)

    task = stack.upgrade(deployment_name, driver_version="1.2.0", app_version="2.0.0")

    assert task.status == "failed", describe(task)
    step = hook_step(task, Hook.UPGRADE, Mode.PRE)
    assert step.status == "failed"
    assert step.error is not None and step.error.startswith(f"Action migrate failed: Job {deployment_name}-")
    assert "exited with code 5" in step.error
    assert "Its last line: Migration 0042 failed: table users is locked" in step.error
    assert step.output_truncated is True
    tail = step.output_tail or ""
    assert len(tail.encode()) <= OUTPUT_TAIL_MAX_BYTES
    assert len(tail.splitlines()) == OUTPUT_TAIL_MAX_LINES
    assert tail.splitlines()[-1] == "Migration 0042 failed: table users is locked"
    # Every whole line shows the token redacted (the line before the error is the one head cut short).
    assert set(tail.splitlines()[:-2]) == {f"migrating rows, leaked {REDACTED}"}
    assert task.error == step.error
    assert [s.name for s in task.steps] == ["Run the upgrade pre-hook"]  # later modes did not run


def test_a_failing_commands_output_with_nul_bytes_reaches_its_step(
    stack: StyrminStack, drivers: None, deployment_name: str
) -> None:
    created = stack.create(deployment_name, driver="shop", driver_version="1.1.0")
    assert created.status == "succeeded", describe(created)

    task = stack.upgrade(deployment_name, driver_version="43.0.0", app_version="2.0.0")

    assert task.status == "failed", describe(task)
    step = hook_step(task, Hook.UPGRADE, Mode.PRE)
    assert step.error is not None and "exited with code 6" in step.error, describe(task)
    assert "Its last line: Migration 0043 failed" in step.error
    # Shown as an undecodable byte is: the server stores no NUL, and refused the whole output before.
    assert step.output_tail == "row 1\ufffd copied\nMigration 0043 failed\n"


@pytest.fixture
def actions_user(stack: StyrminStack) -> Iterator[StyrminStack]:
    yield stack
    stack.set_actions_user(active=True, role="read-write")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"active": False},
            'stop_components(["task-worker"]) of deployment "{name}" was refused by the Styrmin API: '
            'The user "styrmin-actions" is deactivated, so its tokens are refused',
        ),
        (
            {"role": "read-only"},
            'stop_components(["task-worker"]) of deployment "{name}" was refused by the Styrmin API: '
            'User "styrmin-actions" has the role Read-only; this needs Read/write.',
        ),
    ],
    ids=["deactivated", "read-only"],
)
def test_when_styrmin_actions_cannot_write_the_action_step_and_task_fail_saying_why(
    actions_user: StyrminStack, deployment_name: str, tmp_path: Path, change: dict[str, object], says: str
) -> None:
    stack = actions_user
    push_example(stack, tmp_path, "1.0.0")
    created = stack.create(deployment_name, driver="shop", driver_version="1.0.0", app_version="1.0.0")
    assert created.status == "succeeded", describe(created)
    stack.set_actions_user(**change)  # type: ignore[arg-type]

    task = stack.upgrade(deployment_name, app_version="2.0.0")

    assert task.status == "failed", describe(task)
    step = hook_step(task, Hook.UPGRADE, Mode.CORE)
    assert step.status == "failed" and step.started_tasks == []
    assert step.error is not None and step.error.startswith(
        f"Action upgrade failed: {says.format(name=deployment_name)}"
    )
    assert task.error == step.error
