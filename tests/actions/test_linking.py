"""Linking, idempotence and Prefect retries of stop_components, start_components, upgrade_deployment_version."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from styrmin_backend.domain.hooks import Hook, Mode
from styrmin_backend.testing import StyrminStack, describe, hook_step

from .conftest import action, push_example

pytestmark = pytest.mark.slow

ACTIONS = textwrap.dedent(
    """
    import styrmin
    from prefect import flow
    from prefect.runtime import flow_run

    from styrmin_backend.actions import (
        GlobalContext,
        start_components,
        stop_components,
        upgrade_deployment_version,
    )


    @flow(retries=1, retry_delay_seconds=0)
    async def retried_upgrade(context: GlobalContext, target_version: str) -> None:
        await stop_components(components=["task-worker"], context=context)
        if flow_run.run_count == 1:
            await stop_components(components=["task-worker"], context=context)  # already stopped
            assert await upgrade_deployment_version(target_version=target_version, context=context)
            raise RuntimeError("the first attempt stops half done")
        # The retry: the deployment already runs the target, so no second upgrade task starts.
        assert await upgrade_deployment_version(target_version=target_version, context=context) is None
        await start_components(components=["task-worker"], context=context)
        # A plain SDK call, as styrmin-actions too, is not linked to the hook step.
        async with styrmin.AsyncClient() as client:
            change = await client.deployments.start(context.deployment_name, ["task-worker"])
            await client.tasks.wait(change.task.id)
    """
)


def test_tasks_started_by_primitives_are_linked_idempotent_and_survive_a_retry_of_a_half_done_action(
    stack: StyrminStack, deployment_name: str, tmp_path: Path
) -> None:
    tmp = tmp_path
    push_example(stack, tmp, "1.4.0", actions=[])
    push_example(
        stack,
        tmp,
        "1.5.0",
        actions_source=ACTIONS,
        actions=[action("upgrade", "upgrade", "core", "retried_upgrade")],
    )
    created = stack.create(deployment_name, driver="shop", driver_version="1.4.0", app_version="1.0.0")
    assert created.status == "succeeded", describe(created)

    task = stack.upgrade(deployment_name, driver_version="1.5.0", app_version="2.0.0")

    assert task.status == "succeeded", describe(task)
    step = hook_step(task, Hook.UPGRADE, Mode.CORE)
    assert [(t.type.value, t.status.value) for t in step.started_tasks] == [
        ("stop", "succeeded"),
        ("stop", "succeeded"),
        ("upgrade", "succeeded"),
        ("stop", "succeeded"),
        ("start", "succeeded"),
    ], describe(task)
    upgrade = stack.client.tasks.get(step.started_tasks[2].id)
    assert upgrade.started_by is not None and upgrade.started_by.task_type == "upgrade"
    assert upgrade.result is not None and upgrade.result.get("applied") == {
        "app_version": "2.0.0",
        "driver_version": "1.5.0",
    }
    linked = {t.id for t in step.started_tasks}
    plain = [
        t
        for t in stack.client.tasks.list(deployment=deployment_name).items
        if t.type == "start" and t.id not in linked
    ]
    assert len(plain) == 1 and plain[0].requested_by == "styrmin-actions"
    assert stack.client.tasks.get(plain[0].id).started_by is None
