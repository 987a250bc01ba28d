"""Back up the example shop, write more data, upgrade, restore: its data and its version come back.

On the whole stack (server, agent, local cluster, Prefect), with the example driver's own backup and
restore actions.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
import yaml
from lightkube.resources.apps_v1 import Deployment

import styrmin
from styrmin_backend.domain.backups import CHECK_FILES_STEP, RECORD_FILES_STEP, restore_version_step
from styrmin_backend.domain.hooks import Hook, Mode, hook_step_name
from styrmin_backend.testing import StyrminStack, describe
from tests.support.drivers import EXAMPLE_DRIVER

pytestmark = pytest.mark.slow


def _database(stack: StyrminStack, name: str) -> Path:
    return stack.cluster.data_dir / "data" / f"{name}-{name}.sqlite3"


def _orders(stack: StyrminStack, name: str) -> list[str]:
    """Rows the test wrote into the shop's database (a table of its own, as later data)."""
    with closing(sqlite3.connect(_database(stack, name))) as db:
        db.execute("CREATE TABLE IF NOT EXISTS test_orders (item TEXT)")
        return [row[0] for row in db.execute("SELECT item FROM test_orders ORDER BY rowid")]


def _add_order(stack: StyrminStack, name: str, item: str) -> None:
    with closing(sqlite3.connect(_database(stack, name))) as db, db:
        db.execute("CREATE TABLE IF NOT EXISTS test_orders (item TEXT)")
        db.execute("INSERT INTO test_orders VALUES (?)", (item,))


def _schema(stack: StyrminStack, name: str) -> str:
    with closing(sqlite3.connect(_database(stack, name))) as db:
        return str(db.execute("SELECT version FROM schema WHERE id = 1").fetchone()[0])


def _server_image(stack: StyrminStack, name: str) -> str:
    server = stack.kube.get(Deployment, f"{name}-server", namespace=name)
    assert server.spec is not None and server.spec.template.spec is not None
    by_name = {c.name: c.image for c in server.spec.template.spec.containers}
    return str(by_name["server"])


def test_restore_brings_the_data_and_the_version_back(styrmin_stack: StyrminStack) -> None:
    stack, name = styrmin_stack, "backup-demo"
    stack.push_driver(EXAMPLE_DRIVER, version="19.2.0")
    created = stack.create(name, driver="shop", driver_version="19.2.0", app_version="1.0.0")
    assert created.status == "succeeded", describe(created)
    _add_order(stack, name, "before the backup")

    taken = stack.client.backups.create(name)
    task = stack.wait(taken.task.id)

    assert task.status == "succeeded", describe(task)
    assert [s.name for s in task.steps] == [hook_step_name(Hook.BACKUP, Mode.CORE), RECORD_FILES_STEP]
    backup = stack.client.backups.get(taken.backup.id)
    assert (backup.status, backup.label, backup.app_version) == ("succeeded", "manual", "1.0.0")
    assert {f.name for f in backup.files} == {"shop.sqlite3", "schema-version"}
    assert all(f.size > 0 and len(f.sha256) == 64 for f in backup.files)

    _add_order(stack, name, "after the backup")
    upgraded = stack.upgrade(name, app_version="1.1.0")
    assert upgraded.status == "succeeded", describe(upgraded)
    assert _schema(stack, name) == "1.1.0"

    restored = stack.wait(stack.client.deployments.restore(name, backup.id))

    assert restored.status == "succeeded", describe(restored)
    assert [s.name for s in restored.steps] == [
        CHECK_FILES_STEP,
        restore_version_step("1.0.0"),
        hook_step_name(Hook.RESTORE, Mode.CORE),
    ]
    (linked,) = restored.steps[1].started_tasks
    assert (linked.type, linked.status) == ("upgrade", "succeeded")
    assert [t.type for t in restored.steps[2].started_tasks] == ["stop", "start"]
    assert _orders(stack, name) == ["before the backup"]
    assert _schema(stack, name) == "1.0.0"
    assert _server_image(stack, name) == "example.com/shop/server:1.0.0"
    deployment = stack.client.deployments.get(name)
    assert (deployment.status, deployment.app_version, deployment.running_app_version) == (
        "running",
        "1.0.0",
        "1.0.0",
    )


def _server_env(stack: StyrminStack, name: str) -> dict[str, str]:
    server = stack.kube.get(Deployment, f"{name}-server", namespace=name)
    assert server.spec is not None and server.spec.template.spec is not None
    (container,) = [c for c in server.spec.template.spec.containers if c.name == "server"]
    return {e.name: str(e.value) for e in container.env or [] if e.value is not None}


def test_restore_brings_back_the_configuration_the_backup_was_taken_with(
    styrmin_stack: StyrminStack,
) -> None:
    stack, name = styrmin_stack, "backup-config"
    stack.push_driver(EXAMPLE_DRIVER, version="19.5.0")
    created = stack.create(name, driver="shop", driver_version="19.5.0", app_version="1.0.0")
    assert created.status == "succeeded", describe(created)
    before = {"values": {}, "images": {}, "env": {"server": {"SHOP_NOTE": "at the backup"}}}
    assert stack.configure(name, before).status == "succeeded"
    backup = stack.client.backups.create(name)
    assert stack.wait(backup.task.id).status == "succeeded"
    after = {"values": {}, "images": {}, "env": {"server": {"SHOP_NOTE": "changed later"}}}
    assert stack.configure(name, after).status == "succeeded"
    assert _server_env(stack, name)["SHOP_NOTE"] == "changed later"

    restored = stack.wait(stack.client.deployments.restore(name, backup.backup.id))

    assert restored.status == "succeeded", describe(restored)
    # Same version, another configuration: the version step still runs, with the backup's snapshot.
    assert restored.steps[1].name == restore_version_step("1.0.0")
    (linked,) = restored.steps[1].started_tasks
    assert (linked.type, linked.status) == ("upgrade", "succeeded")
    assert _server_env(stack, name)["SHOP_NOTE"] == "at the backup"
    deployment = stack.client.deployments.get(name)
    assert deployment.configuration.env == {"server": {"SHOP_NOTE": "at the backup"}}


def test_a_backup_whose_files_are_gone_is_refused_before_anything_changes(
    styrmin_stack: StyrminStack,
) -> None:
    stack, name = styrmin_stack, "backup-gone"
    stack.push_driver(EXAMPLE_DRIVER, version="19.2.0")
    created = stack.create(name, driver="shop", driver_version="19.2.0", app_version="1.0.0")
    assert created.status == "succeeded", describe(created)
    taken = stack.client.backups.create(name)
    assert stack.wait(taken.task.id).status == "succeeded"
    backup = stack.client.backups.get(taken.backup.id)
    folder = Path(backup.location.removeprefix("folder ")) / backup.key
    (folder / "shop.sqlite3").unlink()
    upgraded = stack.upgrade(name, app_version="1.1.0")
    assert upgraded.status == "succeeded", describe(upgraded)
    _add_order(stack, name, "kept")

    restored = stack.wait(stack.client.deployments.restore(name, backup.id))

    assert restored.status == "failed"
    assert [s.name for s in restored.steps] == [CHECK_FILES_STEP]
    assert restored.error is not None
    assert f"Backup {backup.id} cannot be restored: in {folder}, shop.sqlite3 is missing." in restored.error
    assert _orders(stack, name) == ["kept"]
    assert _schema(stack, name) == "1.1.0"
    assert _server_image(stack, name) == "example.com/shop/server:1.1.0"


def test_a_deployment_whose_driver_has_no_backup_action_cannot_be_backed_up(
    styrmin_stack: StyrminStack, tmp_path: Path
) -> None:
    from tests.actions.conftest import push_example

    stack, name = styrmin_stack, "backup-none"
    push_example(stack, tmp_path, "19.3.0", actions=[])
    created = stack.create(name, driver="shop", driver_version="19.3.0")
    assert created.status == "succeeded", describe(created)
    with pytest.raises(styrmin.ConflictError) as refused:
        stack.client.backups.create(name)
    assert "declares no action for the backup hook" in str(refused.value)


PRE_UPGRADE_ACTIONS = """
from prefect import flow

from styrmin_backend.actions import GlobalContext, create_backup


@flow
async def back_up_first(context: GlobalContext) -> None:
    await create_backup(context=context)
"""


def test_a_failed_upgrade_is_undone_by_restoring_the_backup_its_pre_hook_took(
    styrmin_stack: StyrminStack, tmp_path: Path
) -> None:
    from tests.actions.conftest import action, push_example

    stack, name = styrmin_stack, "backup-undo"
    example = {
        a["name"]: a
        for a in yaml.safe_load((EXAMPLE_DRIVER / "driver.styrmin.yml").read_text())["spec"]["actions"]
    }
    push_example(
        stack,
        tmp_path,
        "19.4.0",
        actions_source=PRE_UPGRADE_ACTIONS,
        actions=[*example.values(), action("back_up_first", "upgrade", "pre", "back_up_first")],
    )
    created = stack.create(name, driver="shop", driver_version="19.4.0", app_version="2.0.0")
    assert created.status == "succeeded", describe(created)
    _add_order(stack, name, "kept through the failed upgrade")

    # The example's migrations only go forward: this upgrade's migration fails after the chart moved.
    failed = stack.upgrade(name, app_version="1.5.0")

    assert failed.status == "failed", describe(failed)
    (pre_backup,) = failed.steps[0].started_tasks
    assert (failed.steps[0].name, pre_backup.type, pre_backup.status) == (
        hook_step_name(Hook.UPGRADE, Mode.PRE),
        "backup",
        "succeeded",
    )
    assert _server_image(stack, name) == "example.com/shop/server:1.5.0"
    (backup,) = [b for b in stack.client.backups.list(name) if b.task_id == pre_backup.id]
    assert (backup.label, backup.app_version) == ("pre-upgrade", "2.0.0")

    restored = stack.wait(stack.client.deployments.restore(name, backup.id))

    assert restored.status == "succeeded", describe(restored)
    assert restored.steps[1].name == restore_version_step("2.0.0")
    assert _server_image(stack, name) == "example.com/shop/server:2.0.0"
    assert _schema(stack, name) == "2.0.0"
    assert _orders(stack, name) == ["kept through the failed upgrade"]
    deployment = stack.client.deployments.get(name)
    assert (deployment.status, deployment.running_app_version, deployment.stopped_components) == (
        "running",
        "2.0.0",
        [],
    )
