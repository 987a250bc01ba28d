"""On the whole stack: a preview of the example's upgrade changes nothing; an action's log followed live."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lightkube.resources.apps_v1 import Deployment

from styrmin_backend.testing import StyrminStack, describe
from tests.actions.conftest import action, push_example
from tests.support.drivers import EXAMPLE_DRIVER
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

GATED_ACTION = """
import asyncio
from pathlib import Path

from prefect import flow, get_run_logger

from styrmin_backend.actions import GlobalContext


@flow
async def gated(context: GlobalContext, target_version: str) -> None:
    logger = get_run_logger()
    logger.info("Waiting at the gate of %s", context.deployment_name)
    gate = Path(context.configuration.values["gate"])
    for _ in range(1200):
        if gate.exists():
            break
        await asyncio.sleep(0.1)
    logger.info("Through the gate to %s", target_version)
"""


def test_preview_of_the_example_s_upgrade_shows_its_migration_and_image_and_changes_nothing(
    stack: StyrminStack, deployment_name: str, tmp_path: Path
) -> None:
    push_example(stack, tmp_path, "1.0.0")
    created = stack.create(deployment_name, driver="shop", driver_version="1.0.0")
    assert created.status == "succeeded", created
    workload = stack.kube.get(Deployment, f"{deployment_name}-server", namespace=deployment_name)
    tasks_before = stack.client.tasks.list(deployment=deployment_name).items

    shown = stack.client.deployments.preview(deployment_name, "upgrade", app_version="2.0.0")

    assert shown.refusal is None
    (upgrade,) = shown.changes
    (hook,) = upgrade.steps
    assert hook.name == "Run the upgrade hook"
    assert [(a.name, a.description) for a in hook.actions] == [
        ("upgrade", "Stop workers, run migration, restart, verify")
    ]
    server = next(
        o for o in shown.objects if o.kind == "Deployment" and o.name == f"{deployment_name}-server"
    )
    assert server.change == "changed"
    assert "+        image: example.com/shop/server:2.0.0" in server.diff
    images = {i.component: i for i in shown.images}
    assert images["server"].after[0] == "example.com/shop/server:2.0.0"
    # Nothing changed in the cluster or the database.
    after = stack.kube.get(Deployment, f"{deployment_name}-server", namespace=deployment_name)
    assert after.metadata.resourceVersion == workload.metadata.resourceVersion
    assert stack.client.tasks.list(deployment=deployment_name).items == tasks_before
    deployment = stack.client.deployments.get(deployment_name)
    assert (deployment.revision, deployment.app_version) == (1, "1.0.0")


def test_the_log_of_a_running_action_is_followed_live_from_the_terminal(
    stack: StyrminStack, deployment_name: str, tmp_path: Path
) -> None:
    push_example(
        stack,
        tmp_path,
        "7.7.1",
        actions_source=GATED_ACTION,
        actions=[action("gated", "upgrade", "core", "gated")],
    )
    gate = tmp_path / "gate"
    configuration = {"values": {"gate": str(gate)}}
    created = stack.create(
        deployment_name, driver="shop", driver_version="7.7.1", configuration=configuration
    )
    assert created.status == "succeeded", created
    change = stack.client.deployments.upgrade(deployment_name, app_version="2.0.0")
    assert change.task is not None
    task_id = change.task.id
    env = {**os.environ, "STYRMIN_URL": stack.url, "STYRMIN_TOKEN": stack.client.token or "", "NO_COLOR": "1"}
    env["STYRMINCTL_POLL_INTERVAL"] = "0.2"
    follower = subprocess.Popen(
        [sys.executable, "-m", "styrmin.cli", "tasks", "logs", str(task_id), "--follow"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follower.stdout is not None
        first = ""
        deadline = time.monotonic() + 300
        while "INFO Waiting at the gate" not in first and time.monotonic() < deadline:
            first = follower.stdout.readline()
            if not first and follower.poll() is not None:
                break
        assert f"[1. gated] INFO Waiting at the gate of {deployment_name}" in first, follower.stderr.read()
        assert stack.client.tasks.get(task_id).status == "running"
        gate.touch()
        rest, errors = follower.communicate(timeout=300)
    finally:
        if follower.poll() is None:
            follower.kill()
    assert follower.returncode == 0, errors
    assert "[1. gated] INFO Through the gate to 2.0.0" in rest
    wait_for(lambda: stack.client.tasks.get(task_id).status.ended, timeout=300, message="the upgrade's end")
    assert stack.client.tasks.get(task_id).status == "succeeded"


def test_rollback_to_an_older_version_runs_the_upgrade_hook_and_names_the_backup_when_it_refuses(
    stack: StyrminStack, deployment_name: str
) -> None:
    stack.push_driver(EXAMPLE_DRIVER, version="19.5.0")
    created = stack.create(deployment_name, driver="shop", driver_version="19.5.0", app_version="1.0.0")
    assert created.status == "succeeded", describe(created)
    taken = stack.client.backups.create(deployment_name)
    assert stack.wait(taken.task.id).status == "succeeded"
    upgraded = stack.upgrade(deployment_name, app_version="1.1.0")
    assert upgraded.status == "succeeded", describe(upgraded)

    shown = stack.client.deployments.preview(deployment_name, "rollback", to_revision=1)
    rolled = stack.client.deployments.rollback(deployment_name, 1)

    assert [c.type for c in shown.changes] == ["upgrade"]
    assert any(f"restore backup {taken.backup.id}" in note for note in shown.notes)
    assert rolled.backup is not None and rolled.backup.backup_id == taken.backup.id
    (change,) = rolled.changes
    task = stack.wait(change)
    assert task.status == "failed"
    hook = task.steps[0]
    assert hook.name == "Run the upgrade hook"
    assert "only go forward" in (hook.error or "") + (hook.output_tail or ""), describe(task)
