"""The backup primitives on the in-memory backend: create_backup links a Backup task to the hook step,
and the example driver's backup and restore actions run their Job with the backup's folder."""

from __future__ import annotations

import pytest

from styrmin_backend.actions import GlobalContext, create_backup, execute_backup_commands
from styrmin_backend.domain.backups import BACKUP_DIR_ENV
from styrmin_backend.domain.hooks import Hook
from styrmin_backend.drivers import SPEC_FILE_NAME, load_driver_spec
from styrmin_backend.testing import (
    BackupTaken,
    Component,
    ComponentsStarted,
    ComponentsStopped,
    Container,
    Context,
    JobStarted,
    State,
)
from tests.support.drivers import EXAMPLE_DRIVER


def shop() -> State:
    return State(
        app_version="1.0.0",
        components=[
            Component("server", [Container("server", "example.com/shop/server:{{ app.version }}")]),
            Component("task-worker", [Container("task-worker", "example.com/shop/task-worker:1.0.0")]),
        ],
    )


@pytest.fixture(scope="module")
def ctx() -> Context:
    context = Context(EXAMPLE_DRIVER, deployment="shop")
    context.load("back_up_database")
    return context


def test_create_backup_in_an_upgrade_pre_hook_starts_a_linked_backup_task(ctx: Context) -> None:
    async def take_backup_first(context: GlobalContext) -> None:
        await create_backup(context=context)

    result = ctx.run(take_backup_first, shop(), target_version="2.0.0", hook="upgrade", mode="pre")

    assert result.error is None
    assert result.effects == [BackupTaken("shop")]
    assert [(t.type.value, t.status.value) for t in result.started_tasks] == [("backup", "succeeded")]


def test_the_example_backs_up_its_database_in_a_job_given_the_backups_folder(ctx: Context) -> None:
    result = ctx.run("back_up_database", shop())

    assert result.error is None
    (job,) = result.effects
    assert job == JobStarted(("shop", "backup"), "example.com/shop/server:1.0.0")
    assert isinstance(job, JobStarted)
    assert job.env[BACKUP_DIR_ENV] == "/styrmin-backups/shop/backup-1"


def test_the_example_restores_with_the_workers_stopped(ctx: Context) -> None:
    result = ctx.run("restore_database", shop())

    assert result.error is None
    assert [type(e) for e in result.effects] == [ComponentsStopped, JobStarted, ComponentsStarted]
    assert result.effects[1] == JobStarted(("shop", "restore"), "example.com/shop/server:1.0.0")


def test_backup_commands_outside_the_backup_and_restore_hooks_say_what_to_use(ctx: Context) -> None:
    async def misplaced(context: GlobalContext) -> None:
        await execute_backup_commands(
            ["shop", "backup"], image="example.com/shop/server:1.0.0", context=context
        )

    result = ctx.run(misplaced, shop(), target_version="2.0.0", hook="upgrade", mode="core")

    assert result.error == (
        "execute_backup_commands runs only in the backup and restore hooks; this action runs in the "
        "upgrade hook. Use execute_commands instead."
    )
    assert result.effects == []


def test_create_backup_is_refused_as_the_server_refuses_it_for_a_driver_without_backup_action() -> None:
    spec = load_driver_spec((EXAMPLE_DRIVER / SPEC_FILE_NAME).read_text())
    without_backup = spec.model_copy(
        update={
            "spec": spec.spec.model_copy(
                update={"actions": [a for a in spec.spec.actions if a.hook != Hook.BACKUP]}
            )
        }
    )

    async def take_backup_first(context: GlobalContext) -> None:
        await create_backup(context=context)

    result = Context(without_backup).run(take_backup_first, shop(), hook="upgrade", mode="pre")

    assert result.error == (
        'create_backup() of deployment "shop" failed: Deployment "shop" cannot be backed up: its driver '
        f"shop@{spec.metadata.version} declares no action for the backup hook. A driver author adds one "
        "(hook: backup) to make its deployments backed up. (HTTP 409)"
    )
    assert result.effects == []
    assert result.started_tasks == []
